"""The fleet service's configuration: the daemons it watches, read from TOML and written back to it.

Every key is documented in docs/fleet.md and docs/config.md. The file is rewritten whole (atomically, through
a temporary file in the same folder) when daemons are added or removed at run time, so comments in it are
not kept.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..config import DEFAULT_PORT, coerce_value
from ..errors import ConfigError

__all__ = ["DEFAULT_FLEET_PORT", "DaemonSpec", "FleetConfig", "dump_toml"]

DEFAULT_FLEET_PORT = 9830
DEFAULT_DAEMON_PORT = DEFAULT_PORT  # a daemon reached without a port in its URL
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


@dataclass(frozen=True)
class DaemonSpec:
    """One daemon the fleet watches: reached at ``url``, or through an SSH tunnel to ``ssh``.

    Exactly one of ``url`` and ``ssh`` is set. Over SSH the daemon is reached at 127.0.0.1:``remote_port`` on
    the far machine; ``ssh_options`` are passed to the system ``ssh`` client as they are (``-p``, ``-i``...).
    """

    name: str
    url: str = ""
    ssh: str = ""
    remote_port: int = DEFAULT_DAEMON_PORT
    ssh_options: tuple[str, ...] = ()
    token: str = ""
    cost_per_hour: float | None = None

    def __post_init__(self) -> None:
        _check(bool(_NAME.match(self.name)), "name", f"{self.name!r}: expected 1-63 of A-Z a-z 0-9 . _ -")
        _check(bool(self.url) != bool(self.ssh), "url", f"daemon {self.name!r}: give exactly one of url, ssh")
        if self.url:
            parts = urlsplit(self.url)
            ok = parts.scheme in ("http", "https") and bool(parts.netloc) and parts.path in ("", "/")
            _check(ok, "url", f"daemon {self.name!r}: expected http(s)://host:port, got {self.url!r}")
        if self.ssh:
            _check(not self.ssh.startswith("-"), "ssh", f"daemon {self.name!r}: expected [user@]host")
        _check(0 < self.remote_port < 65536, "remote_port", "expected 1..65535")
        if self.cost_per_hour is not None:
            _check(self.cost_per_hour >= 0, "cost_per_hour", "expected a number >= 0")

    @property
    def where(self) -> str:
        """Where the daemon is, for people: its URL, or ``ssh://target:port``."""
        return self.url.rstrip("/") if self.url else f"ssh://{self.ssh}:{self.remote_port}"

    def to_toml_dict(self) -> dict[str, Any]:
        """The keys that differ from their defaults, as the config file holds them."""
        out: dict[str, Any] = {"name": self.name}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name != "name" and value != f.default:
                out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_dict(cls, values: dict[str, Any], *, source: str) -> DaemonSpec:
        """Build from plain values (a TOML table or a JSON body), naming ``source`` in errors."""
        spec: DaemonSpec = _build(cls, values, source)
        return spec


@dataclass(frozen=True)
class FleetConfig:
    """Everything ``prooflane fleet`` reads at start; the daemon list may change at run time."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_FLEET_PORT
    token: str = ""
    poll_secs: float = 1.0
    timeout_secs: float = 2.0
    stale_after_secs: float = 5.0
    backoff_max_secs: float = 10.0
    events_idle_secs: float = 30.0
    daemons: tuple[DaemonSpec, ...] = field(default=())

    def __post_init__(self) -> None:
        _check(0 <= self.port < 65536, "port", "expected 0..65535 (0: any free port)")
        for key in ("poll_secs", "timeout_secs", "stale_after_secs", "backoff_max_secs", "events_idle_secs"):
            _check(getattr(self, key) > 0, key, "expected a number of seconds > 0")
        _check(self.backoff_max_secs >= self.poll_secs, "backoff_max_secs", "expected at least poll_secs")
        names = [d.name for d in self.daemons]
        dupes = sorted({n for n in names if names.count(n) > 1})
        _check(not dupes, "daemons", f"names must be unique; repeated: {', '.join(dupes)}")

    @classmethod
    def load(cls, path: Path, **overrides: Any) -> FleetConfig:
        """The TOML file at ``path`` (a missing file is an empty fleet), then non-None ``overrides``."""
        values: dict[str, Any] = {}
        try:
            values = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            values = {}
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read the fleet config ({exc.strerror})") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML ({exc})") from None
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls.from_dict(values, source=str(path))

    @classmethod
    def from_dict(cls, values: dict[str, Any], *, source: str = "fleet config") -> FleetConfig:
        """Build from plain values; ``daemons`` is a list of tables (``[[daemons]]`` in TOML)."""
        values = dict(values)
        raw = values.pop("daemons", [])
        if not isinstance(raw, list) or not all(isinstance(d, dict) for d in raw):
            raise ConfigError(f"{source}: key 'daemons': expected [[daemons]] tables")
        daemons = tuple(DaemonSpec.from_dict(d, source=f"{source}: daemons[{i}]") for i, d in enumerate(raw))
        config: FleetConfig = _build(cls, {**values, "daemons": daemons}, source)
        return config

    def to_toml(self) -> str:
        """The config as TOML text: the top-level keys that differ from their defaults, then the daemons."""
        top = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name != "daemons" and getattr(self, f.name) != f.default
        }
        return dump_toml(top, [d.to_toml_dict() for d in self.daemons])

    def save(self, path: Path) -> None:
        """Write the config to ``path`` atomically, keeping the file's permission bits (0600 when new)."""
        path = Path(path)
        mode = path.stat().st_mode & 0o777 if path.exists() else 0o600
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(fd, "w") as out:
                out.write(self.to_toml())
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def dump_toml(top: dict[str, Any], daemons: list[dict[str, Any]]) -> str:
    """TOML for the fleet config's value types: strings, numbers, booleans and lists of strings."""
    lines = [f"{key} = {_toml_value(value)}" for key, value in top.items()]
    for table in daemons:
        lines += ["", "[[daemons]]"]
        lines += [f"{key} = {_toml_value(value)}" for key, value in table.items()]
    return "\n".join(lines).lstrip("\n") + "\n"


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {type(value).__name__}")


def _build(cls: Any, values: dict[str, Any], source: str) -> Any:
    known = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        if key not in known:
            raise ConfigError(f"{source}: unknown key {key!r} (see docs/fleet.md for the keys)")
        kwargs[key] = value if key == "daemons" else coerce_value(source, key, known[key].type, value)
    try:
        return cls(**kwargs)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    except TypeError as exc:  # a required key is missing
        raise ConfigError(f"{source}: {exc}") from None


def _check(ok: bool, key: str, problem: str) -> None:
    if not ok:
        raise ConfigError(f"key {key!r}: {problem}")
