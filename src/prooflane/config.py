"""The daemon's configuration: one frozen dataclass, loaded from TOML over embedded defaults.

Every key is documented in docs/config.md. A value of ``0`` (or an empty list) for a count or a size means
"derive it from the machine"; ``Config.resolved()`` turns those into concrete numbers once, at start.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from .errors import ConfigError
from .logs import LOG_FILE_NAME, LOG_FORMATS, LOG_LEVELS

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "DEFAULT_URL",
    "Config",
    "RaySettings",
    "check_server_keys",
    "coerce_value",
    "default_data_dir",
    "default_threads",
    "visible_gpus",
]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9821
DEFAULT_URL = f"http://{DEFAULT_HOST}:{DEFAULT_PORT}"
_GIB = 1 << 30
DEVICE_KINDS = ("cpu", "cuda")


def default_data_dir() -> Path:
    """``$PROOFLANE_DATA``, else ``$XDG_DATA_HOME/prooflane``, else ``~/.local/share/prooflane``."""
    if env := os.environ.get("PROOFLANE_DATA"):
        return Path(env)
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "prooflane"


@dataclass(frozen=True)
class RaySettings:
    """The ``[ray]`` table: running synthesis and the device workers on a Ray cluster (docs/ray.md).

    ``address`` empty: no Ray (the process backend, on this machine). Each key ``k`` is also accepted as the
    flat key ``ray_k``, and errors name it so.
    """

    address: str = ""
    synthesis_cpus: float = 1.0
    synthesis_memory_bytes: int = 512 << 20
    device_cpus: float = 1.0
    worker_memory_bytes: int = 0
    include_dashboard: bool = False
    start_timeout_secs: float = 120.0

    def __post_init__(self) -> None:
        _check(self.synthesis_cpus > 0, "ray_synthesis_cpus", "expected a positive number of CPUs")
        _check(self.device_cpus >= 0, "ray_device_cpus", "expected a number of CPUs >= 0")
        for key in ("synthesis_memory_bytes", "worker_memory_bytes"):
            _check(getattr(self, key) >= 0, f"ray_{key}", "expected 0 (none declared) or a positive number")
        _check(self.start_timeout_secs > 0, "ray_start_timeout_secs", "expected a positive number")


@dataclass(frozen=True)
class Config:
    """Everything the daemon reads at start; frozen, so one value has one home for the daemon's life."""

    data_dir: Path = field(default_factory=default_data_dir)
    keys_dir: Path | None = None
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    profile: str = "tiny"
    curve: str = "bn128"
    token: str = ""  # the admin token: every route (docs/operations.md, "Security")
    read_tokens: tuple[str, ...] = ()  # tokens that may read the log
    submit_tokens: tuple[str, ...] = ()  # tokens that may also submit and cancel jobs
    admin_tokens: tuple[str, ...] = ()  # tokens that may do everything, as `token`
    devices: tuple[str, ...] = ()
    workers_per_device: int = 1
    # Each cuda device's memory for its budget; 0: what the device reports (docs/config.md).
    device_memory_bytes: int = 0
    synthesis_workers: int = 1
    synthesis_workers_max: int = 0
    worker_niceness: int = 5
    # Threads of each MSM and NTT call in a worker; 0: the cores shared among the workers (docs/engine.md).
    threads_per_call: int = 0
    # Fixed-base tables of the keys' bases (faster MSMs for about ten times a key's bases of memory): "auto"
    # builds a key's in the background once it is proven and uses them where they fit; true builds them when
    # a worker first loads a key; false never (docs/config.md).
    msm_tables: bool | str = "auto"
    # A finalizer process beside each worker's prover ("auto": on cuda devices; on cpu devices the prover
    # finishes each partition itself, as the core would run both anyway): docs/config.md, docs/engine.md.
    split_prove: bool | str = "auto"
    core_budget: int = 0
    memory_budget_bytes: int = 0
    memory_margin_bytes: int = 2 * _GIB
    prefetch_partitions: int = 0
    max_attempts: int = 3
    stall_secs: float = 300.0
    live_retention_secs: float = 60.0
    max_request_bytes: int = 1 << 20
    max_circuit_bytes: int = 4 * _GIB  # one upload's body: a circuit's .zkey and .wasm, or a job's .wtns
    max_partitions_per_job: int = 1024  # a circom job's witnesses or circuit inputs (one partition each)
    # The circom keys each synthesis process keeps read, by their files' sizes (docs/config.md).
    synthesis_key_cache_bytes: int = 256 << 20
    # A partition's synthesis (a circuit's witness generator, its matrices) may run this long; past it, the
    # process running it is ended and the partition fails, naming the limit (docs/config.md).
    synthesis_timeout_secs: float = 300.0
    # WebAssembly memory a circom witness generator may use for one partition, reserved from the memory budget
    # with it; 0: 64 MiB and 1 KiB a wire of the circuit (docs/config.md).
    witness_memory_bytes: int = 0
    ray: RaySettings = field(default_factory=RaySettings)
    request_timeout_secs: float = 30.0
    max_connections: int = 1024  # HTTP connections at once (lowered to what the open-files limit holds)
    max_connections_per_client: int = 256  # from one IPv4 address or IPv6 /64 (docs/config.md)
    max_streams: int = 512  # event streams and long-polls at once (at most half of max_connections)
    # An upload bringing fewer bytes a second over a request_timeout_secs window (after its first) is cut
    # off, and below that rate is the first closed to make room at a cap; uploads, streams and long-polls
    # never hold the last reserved_connections connections (of all, or of one client's; at most half of
    # either): those stay for short requests (docs/config.md; docs/operations.md, "Limits").
    min_upload_bytes_per_sec: int = 16 << 10
    reserved_connections: int = 32
    # Host names (besides IP addresses, localhost and this machine's own names) clients may use for the
    # daemon: any other Host header is refused (DNS rebinding).
    allowed_hosts: tuple[str, ...] = ()
    # Folders whose files requests may name (sectors, witnesses, circuits), besides data_dir (docs/config.md).
    allowed_roots: tuple[Path, ...] = ()
    log_format: str = "text"  # text for people, json for log shippers (docs/operations.md, "Logs")
    log_level: str = "info"
    # The daemon's log file, data_dir/prooflane.log, rotated at this size (0: standard error only).
    log_file_bytes: int = 16 << 20
    log_file_backups: int = 3  # rotated files kept: prooflane.log.1 .. prooflane.log.N

    def __post_init__(self) -> None:
        # Profiles and curves have their homes in the circuits and the prover (imported here: heavy to load).
        from .circuits.profiles import PROFILES
        from .groth16.curves import CURVES

        _check(self.profile in PROFILES, "profile", f"expected one of {', '.join(PROFILES)}")

        _check(self.curve in CURVES, "curve", f"expected one of {', '.join(CURVES)}")
        _check(0 < self.port < 65536, "port", "expected 1..65535")
        _check(self.workers_per_device >= 1, "workers_per_device", "expected at least 1")
        for key in (
            "synthesis_workers",
            "synthesis_workers_max",
            "core_budget",
            "memory_budget_bytes",
            "memory_margin_bytes",
            "prefetch_partitions",
            "device_memory_bytes",
            "threads_per_call",
        ):
            _check(getattr(self, key) >= 0, key, "expected 0 (automatic) or a positive number")
        _check(0 <= self.worker_niceness <= 19, "worker_niceness", "expected 0..19")
        _check(self.max_attempts >= 1, "max_attempts", "expected at least 1")
        _check(self.stall_secs > 0, "stall_secs", "expected a number of seconds > 0")
        _check(self.live_retention_secs >= 0, "live_retention_secs", "expected a number of seconds >= 0")
        _check(self.max_circuit_bytes >= 1024, "max_circuit_bytes", "expected at least 1024")
        _check(self.max_partitions_per_job >= 1, "max_partitions_per_job", "expected at least 1")
        _check(self.synthesis_key_cache_bytes >= 0, "synthesis_key_cache_bytes", "expected 0 or more bytes")
        _check(self.synthesis_timeout_secs > 0, "synthesis_timeout_secs", "expected a number of seconds > 0")
        _check(self.witness_memory_bytes == 0 or self.witness_memory_bytes >= 1 << 20, "witness_memory_bytes",
               "expected 0 (automatic) or at least 1048576 (1 MiB)")  # fmt: skip
        check_server_keys(self)
        check_tokens(self, ("token", "read_tokens", "submit_tokens", "admin_tokens"))
        _check(self.log_format in LOG_FORMATS, "log_format", f"expected one of {', '.join(LOG_FORMATS)}")
        _check(self.log_level in LOG_LEVELS, "log_level", f"expected one of {', '.join(LOG_LEVELS)}")
        _check(self.log_file_bytes == 0 or self.log_file_bytes >= 4096, "log_file_bytes",
               "expected 0 (no log file) or at least 4096")  # fmt: skip
        _check(self.log_file_backups >= 1, "log_file_backups", "expected at least 1")
        _check(isinstance(self.msm_tables, bool) or self.msm_tables == "auto", "msm_tables",
               f"expected true, false or \"auto\", got {self.msm_tables!r}")  # fmt: skip
        _check(isinstance(self.split_prove, bool) or self.split_prove == "auto", "split_prove",
               f"expected true, false or \"auto\", got {self.split_prove!r}")  # fmt: skip
        _check(not (self.msm_tables is True and self.ray.address), "msm_tables",
               "the tables are kept by local worker processes, not on a Ray cluster")  # fmt: skip
        for root in self.allowed_roots:
            _check(Path(root).is_absolute(), "allowed_roots", f"{str(root)!r}: expected an absolute folder")
        for device in self.devices:
            kind, colon, index = device.partition(":")
            _check(
                kind in DEVICE_KINDS and (not colon or index.isdigit()),
                "devices",
                f"unknown device {device!r}: expected 'cpu[:N]' or 'cuda[:N]'",
            )

    @classmethod
    def load(cls, path: Path | None = None, **overrides: Any) -> Config:
        """Embedded defaults, then the TOML file at ``path`` (if any), then non-None ``overrides`` (flat
        keys: ``ray_address`` for ``[ray] address``)."""
        values: dict[str, Any] = {}
        if path is not None:
            try:
                values = tomllib.loads(Path(path).read_text())
            except OSError as exc:
                raise ConfigError(f"{path}: cannot read the config file ({exc.strerror})") from None
            except tomllib.TOMLDecodeError as exc:
                raise ConfigError(f"{path}: not valid TOML ({exc})") from None
        source = str(path) if path else "config"
        values = _flatten_tables(values, source)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls.from_dict(values, source=source)

    @classmethod
    def from_dict(cls, values: dict[str, Any], *, source: str = "config") -> Config:
        """Build a Config from plain values (as TOML gives them), naming ``source`` in errors."""
        known = {f.name: f for f in dataclasses.fields(cls) if f.name != "ray"}
        known_ray = {f"ray_{f.name}": f for f in dataclasses.fields(RaySettings)}
        kwargs: dict[str, Any] = {}
        ray: dict[str, Any] = {}
        for key, value in _flatten_tables(values, source).items():
            if key in known_ray:
                ray[key.removeprefix("ray_")] = coerce_value(source, key, known_ray[key].type, value)
            elif key in known:
                kwargs[key] = coerce_value(source, key, known[key].type, value)
            else:
                raise ConfigError(f"{source}: unknown key {key!r} (see docs/config.md for the keys)")
        try:
            return cls(**kwargs, ray=RaySettings(**ray))
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None

    def resolved(self) -> Config:
        """A copy with every automatic (0 / empty) value replaced by what this machine gives."""
        cores = os.cpu_count() or 1
        gpus = 0 if self.devices else visible_gpus(simulator=False)
        devices = (
            self.devices or tuple(f"cuda:{i}" for i in range(gpus)) or tuple(f"cpu:{i}" for i in range(cores))
        )
        devices = tuple(d if ":" in d else f"{d}:{i}" for i, d in enumerate(devices))
        budget = self.memory_budget_bytes
        if budget == 0:
            budget = max(psutil.virtual_memory().total - self.memory_margin_bytes, 256 << 20)
        workers = len(devices) * self.workers_per_device
        prefetch = self.prefetch_partitions or workers
        synthesis = self.synthesis_workers or cores
        return dataclasses.replace(
            self,
            keys_dir=self.keys_dir or self.data_dir / "keys",
            devices=devices,
            synthesis_workers=synthesis,
            synthesis_workers_max=max(synthesis, self.synthesis_workers_max or cores),
            memory_budget_bytes=budget,
            prefetch_partitions=prefetch,
            threads_per_call=self.threads_per_call or default_threads(cores, workers),
        )

    @property
    def log_file(self) -> Path | None:
        """Where the daemon writes its log (besides standard error), or None when ``log_file_bytes`` is 0."""
        return self.data_dir / LOG_FILE_NAME if self.log_file_bytes else None

    @property
    def url(self) -> str:
        """The daemon's base URL."""
        return f"http://{self.host}:{self.port}"


def default_threads(cores: int, workers: int) -> int:
    """The thread policy, its one home: each worker's calls get an equal share of the cores, so that by
    default workers x threads per call <= cores (at least 1, at most the prover's ``MAX_THREADS``);
    ``PROOFLANE_THREADS`` in the daemon's environment, where set, is the explicit value instead."""
    from .groth16.arithmetic.base import MAX_THREADS, THREADS_ENV  # the prover's bound (heavy to import)

    given = os.environ.get(THREADS_ENV, "").strip()
    if given.isdigit() and int(given) > 0:
        return min(int(given), MAX_THREADS)
    return max(1, min(cores // max(workers, 1), MAX_THREADS))


def visible_gpus(*, simulator: bool = True) -> int:
    """How many devices the ``cuda`` extra can use here: the NVIDIA GPUs its driver shows, or the one device
    of numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) unless ``simulator`` is False; 0 without the
    extra or a driver."""
    from .groth16 import cuda

    if cuda.simulated() and not simulator:
        return 0
    if cuda.unavailable_reason() is not None:
        return 0
    from numba import cuda as numba_cuda

    return len(numba_cuda.gpus)


def _check(ok: bool, key: str, problem: str) -> None:
    if not ok:
        raise ConfigError(f"key {key!r}: {problem}")


def _flatten_tables(values: dict[str, Any], source: str) -> dict[str, Any]:
    """The one nested table, ``[ray]``: its ``address`` becomes the flat key ``ray_address``, and so on."""
    flat = {k: v for k, v in values.items() if k != "ray"}
    table = values.get("ray", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{source}: key 'ray': expected a table ([ray]), got {type(table).__name__}")
    for key, value in table.items():
        if f"ray_{key}" in flat:
            raise ConfigError(f"{source}: 'ray.{key}' is also given as 'ray_{key}'")
        flat[f"ray_{key}"] = value
    return flat


def check_server_keys(config: Any) -> None:
    """The checks of an HTTP server's keys, the daemon's and the fleet's (one rule for both)."""
    _check(config.max_request_bytes >= 1024, "max_request_bytes", "expected at least 1024")
    _check(config.request_timeout_secs > 0, "request_timeout_secs", "expected a number of seconds > 0")
    _check(config.max_connections >= 16, "max_connections", "expected at least 16")
    _check(config.max_connections_per_client >= 1, "max_connections_per_client", "expected at least 1")
    _check(config.max_streams >= 1, "max_streams", "expected at least 1")
    _check(config.min_upload_bytes_per_sec >= 1, "min_upload_bytes_per_sec", "expected at least 1")
    _check(config.reserved_connections >= 0, "reserved_connections", "expected 0 or more")


def check_tokens(config: Any, keys: tuple[str, ...]) -> None:
    """Every token of ``keys`` (a string, or a list of them) printable ASCII (it goes in an Authorization
    header: a CR or LF would end it), and no token given twice (its scope would be two)."""
    seen: set[str] = set()
    for key in keys:
        value = getattr(config, key)
        for token in (value,) if isinstance(value, str) else value:
            bad = next((c for c in token if not " " <= c <= "~"), None)
            _check(bad is None, key, f"a token holds {bad!r}: expected printable ASCII only (it is sent in "
                                     "an Authorization header)")  # fmt: skip
            _check(bool(token) or isinstance(value, str), key, "expected tokens, not an empty string")
            _check(token not in seen or not token, key, "a token is given twice (with two scopes)")
            seen.add(token)


def coerce_value(source: str, key: str, annotation: Any, value: Any) -> Any:
    """``value`` as TOML gave it, checked against a config field's type (its annotation text) and
    converted (ints to floats, lists to tuples, strings to paths); ConfigError naming the key if wrong."""
    kind = str(annotation)
    ok: bool
    if kind in ("Path", "Path | None"):
        ok, value = isinstance(value, str), Path(str(value)).expanduser()
    elif kind == "bool":
        ok = isinstance(value, bool)
    elif kind == "bool | str":
        ok = isinstance(value, bool | str)
    elif kind == "int":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind in ("float", "float | None"):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif kind == "str":
        ok = isinstance(value, str)
    elif kind == "tuple[Path, ...]":
        ok = isinstance(value, list | tuple) and all(isinstance(v, str | Path) for v in value)
        value = tuple(Path(str(v)).expanduser() for v in value) if ok else value
    else:  # tuple[str, ...]
        ok = isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)
        value = tuple(value) if ok else value
    if not ok:
        raise ConfigError(f"{source}: key {key!r}: expected {kind}, got {type(value).__name__} {value!r}")
    return value
