"""The fleet service's configuration: the daemons it watches, read from TOML and written back to it.

Every key is documented in docs/fleet.md and docs/config.md. The file is rewritten whole (atomically, through
a temporary file in the same folder) when daemons are added or removed at run time, so comments in it are
not kept.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import tomli_w

from ..config import DEFAULT_PORT, Config, check_server_keys, check_tokens, coerce_value
from ..errors import ConfigError

__all__ = [
    "DEFAULT_FLEET_PORT",
    "DEPLOY_KEYS",
    "PINNED_SSH_OPTIONS",
    "SSH_OPTIONS",
    "DaemonSpec",
    "FleetConfig",
    "check_ssh_options",
    "check_token",
    "dump_toml",
]

DEFAULT_FLEET_PORT = 9830
DEFAULT_DAEMON_PORT = DEFAULT_PORT  # a daemon reached without a port in its URL
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
# An ssh target: [user@]host, the host a name, an IPv4 address or an IPv6 one (bare or in brackets). No
# character a shell or ssh would read as anything else (ssh is run without a shell, but a target starting
# with "-" would be an option).
_SSH_TARGET = re.compile(
    r"^(?:[A-Za-z0-9_][A-Za-z0-9._-]{0,63}@)?"
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|\[?[0-9A-Fa-f:.]{2,45}\]?)$"
)
SSH_OPTIONS = frozenset({
    "Port", "IdentityFile", "User", "IdentitiesOnly", "HostKeyAlias", "ConnectTimeout", "ServerAliveInterval",
    "ServerAliveCountMax",
})  # fmt: skip
"""The ssh options a daemon's ``ssh_options`` may set (as ``-o Key=Value``); none of them runs a program
or writes a file. ProxyCommand, LocalCommand, KnownHostsCommand, ``-F`` (a config file of options) and the
like are refused: whoever may change the fleet's daemons must not run commands as the fleet's user."""
PINNED_SSH_OPTIONS = frozenset({"UserKnownHostsFile", "StrictHostKeyChecking", "UpdateHostKeys"})
"""The ssh options the fleet sets itself, before a daemon's own (ssh takes the first value it is given):
``StrictHostKeyChecking=yes`` and ``UpdateHostKeys=no`` (its ssh writes no known-hosts line) and
``UserKnownHostsFile`` from the fleet's ``ssh_known_hosts_file``. A daemon's ``ssh_options`` naming one
is refused: with them a token holder could make the fleet's ssh append a line to a file of their choice."""
DEPLOY_KEYS = ("deploy_dir", "deploy_claim")
"""The keys of a ``[[daemons]]`` table that only a deploy writes (``POST /fleet/daemons`` refuses them)."""
_CLAIM = re.compile(r"^[0-9a-f]{32}$")
_SSH_FLAGS = {"-p": "Port", "-i": "IdentityFile", "-l": "User"}


@dataclass(frozen=True)
class DaemonSpec:
    """One daemon the fleet watches: reached at ``url``, or through an SSH tunnel to ``ssh``.

    Exactly one of ``url`` and ``ssh`` is set. Over SSH the daemon is reached at 127.0.0.1:``remote_port`` on
    the far machine; ``ssh_options`` are passed to the system ``ssh`` client: ``-p PORT``, ``-i FILE``,
    ``-l USER`` or ``-o Key=Value`` for the keys of :data:`SSH_OPTIONS` only.
    """

    name: str
    url: str = ""
    ssh: str = ""
    remote_port: int = DEFAULT_DAEMON_PORT
    ssh_options: tuple[str, ...] = ()
    token: str = ""
    cost_per_hour: float | None = None
    deploy_dir: str = ""  # the daemon's folder on its host when `prooflane fleet deploy` put it there
    deploy_claim: str = ""  # the id deploy wrote into that folder (.prooflane-claim), checked before each run

    def __post_init__(self) -> None:
        _check(bool(_NAME.match(self.name)), "name", f"{self.name!r}: expected 1-63 of A-Z a-z 0-9 . _ -")
        _check(bool(self.url) != bool(self.ssh), "url", f"daemon {self.name!r}: give exactly one of url, ssh")
        if self.url:
            _check_url(self.name, self.url)
        if self.ssh:
            _check(bool(_SSH_TARGET.match(self.ssh)), "ssh", f"daemon {self.name!r}: expected [user@]host, "
                   f"got {self.ssh!r}")  # fmt: skip
            check_ssh_options(self.name, self.ssh_options)
        _check(0 < self.remote_port < 65536, "remote_port", "expected 1..65535")
        check_token(self.token, f"daemon {self.name!r}")
        if self.cost_per_hour is not None:
            _check(self.cost_per_hour >= 0, "cost_per_hour", "expected a number >= 0")
        _check(not self.deploy_dir or bool(self.ssh), "deploy_dir", "only for a daemon reached with ssh")
        _check(not any(ord(c) < 32 for c in self.deploy_dir), "deploy_dir", "expected one line")
        _check(not self.deploy_claim or bool(self.deploy_dir), "deploy_claim", "only with deploy_dir")
        _check(not self.deploy_claim or bool(_CLAIM.match(self.deploy_claim)), "deploy_claim",
               "expected the 32 hex digits `prooflane fleet deploy` wrote")  # fmt: skip

    @property
    def where(self) -> str:
        """Where the daemon is, for people: its URL (without a user or password in it), or
        ``ssh://target:port``."""
        if not self.url:
            return f"ssh://{self.ssh}:{self.remote_port}"
        parts = urlsplit(self.url)
        host = parts.netloc.rpartition("@")[2]
        return parts._replace(netloc=host).geturl().rstrip("/")

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

    @classmethod
    def added(cls, values: dict[str, Any]) -> DaemonSpec:
        """A daemon as ``POST /fleet/daemons`` adds it: a table without the keys only a deploy writes (a
        daemon added so is followed, never stopped or restarted by the fleet)."""
        given = [key for key in DEPLOY_KEYS if key in values]
        if given:
            raise ConfigError(f"daemon: key {given[0]!r} is set by `prooflane fleet deploy` alone (POST "
                              "/fleet/daemons/NAME/deploy): a daemon added here is followed, not "
                              "managed")  # fmt: skip
        return cls.from_dict(values, source="daemon")


@dataclass(frozen=True)
class FleetConfig:
    """Everything ``prooflane fleet`` reads at start; the daemon list may change at run time."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_FLEET_PORT
    token: str = ""  # the deploy token: every route (docs/fleet.md, "Tokens")
    view_tokens: tuple[str, ...] = ()  # tokens that may read the daemons' logs (which then need one)
    manage_tokens: tuple[str, ...] = ()  # may also add, remove, stop, restart, register circuits, submit
    deploy_tokens: tuple[str, ...] = ()  # may do everything, as `token`
    poll_secs: float = 1.0
    timeout_secs: float = 2.0
    stale_after_secs: float = 5.0
    backoff_max_secs: float = 10.0
    events_idle_secs: float = 30.0
    max_answer_bytes: int = 64 << 20  # the most the fleet reads of one answer of a daemon (/status, relayed)
    max_upload_bytes: int = 4 << 30  # the largest circuit upload the fleet spools to pass on to its daemons
    price_per_proof: float | None = None  # what one proof earns: each daemon's break-even proofs per hour
    deploy_timeout_secs: float = 900.0  # bound on each step of a deploy on a host (pip may download a lot)
    deploy_healthy_secs: float = 300.0  # how long a deployed or restarted daemon has to say it can work
    ssh_known_hosts_file: str = ""  # the fleet's ssh reads host keys from it (empty: ssh's own files)
    # The fleet's own HTTP server runs on the daemon's (prooflane.server.limits), with the daemon's keys and
    # defaults: docs/config.md.
    request_timeout_secs: float = Config.request_timeout_secs
    max_connections: int = Config.max_connections
    max_connections_per_client: int = Config.max_connections_per_client
    max_streams: int = Config.max_streams
    min_upload_bytes_per_sec: int = Config.min_upload_bytes_per_sec
    reserved_connections: int = Config.reserved_connections
    max_request_bytes: int = Config.max_request_bytes
    allowed_hosts: tuple[str, ...] = ()  # Host names besides IP addresses, localhost and the machine's own
    daemons: tuple[DaemonSpec, ...] = field(default=())

    def __post_init__(self) -> None:
        _check(0 <= self.port < 65536, "port", "expected 0..65535 (0: any free port)")
        check_token(self.token, "the fleet")
        check_tokens(self, ("token", "view_tokens", "manage_tokens", "deploy_tokens"))
        for key in (
            "poll_secs",
            "timeout_secs",
            "stale_after_secs",
            "backoff_max_secs",
            "events_idle_secs",
            "deploy_timeout_secs",
            "deploy_healthy_secs",
        ):
            _check(getattr(self, key) > 0, key, "expected a number of seconds > 0")
        _check(self.backoff_max_secs >= self.poll_secs, "backoff_max_secs", "expected at least poll_secs")
        _check(self.max_answer_bytes >= 1 << 16, "max_answer_bytes", "expected at least 65536")
        _check(self.max_upload_bytes >= 1024, "max_upload_bytes", "expected at least 1024")
        _check(not any(c.isspace() or ord(c) < 32 for c in self.ssh_known_hosts_file), "ssh_known_hosts_file",
               "expected one path without spaces")  # fmt: skip
        check_server_keys(self)
        if self.price_per_proof is not None:
            _check(self.price_per_proof > 0, "price_per_proof", "expected a number > 0")
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
    """The config as TOML text: the top-level keys, then one ``[[daemons]]`` table each. Values are written by
    tomli_w (any string, emoji and control characters included, comes back as it was)."""
    parts = [tomli_w.dumps(top)] if top else []
    parts += [f"[[daemons]]\n{tomli_w.dumps(table)}" for table in daemons]
    return "\n".join(parts)


def check_ssh_options(name: str, options: tuple[str, ...]) -> None:
    """Refuse any ssh option but ``-p``, ``-i``, ``-l`` and ``-o Key=Value`` for the keys of SSH_OPTIONS."""
    items = list(options)
    while items:
        option = items.pop(0)
        flag, value = option[:2], option[2:]
        if flag in (*_SSH_FLAGS, "-o") and not value:
            if not items:
                raise ConfigError(f"key 'ssh_options': daemon {name!r}: {option} needs a value")
            value = items.pop(0)
        if flag in _SSH_FLAGS:
            key = _SSH_FLAGS[flag]
        elif flag == "-o":
            key, _, value = value.replace(" ", "=", 1).partition("=")
        else:
            allowed_keys = ", ".join(sorted(SSH_OPTIONS))
            raise ConfigError(f"key 'ssh_options': daemon {name!r}: {option!r} is not allowed (expected -p, "
                              f"-i, -l or -o Key=Value with Key one of {allowed_keys})")  # fmt: skip
        pinned = {k.lower(): k for k in PINNED_SSH_OPTIONS}
        if key.lower() in pinned:
            raise ConfigError(f"key 'ssh_options': daemon {name!r}: option {pinned[key.lower()]!r} is not "
                              "allowed: the fleet pins it (StrictHostKeyChecking=yes, UpdateHostKeys=no, "
                              "UserKnownHostsFile from the fleet's ssh_known_hosts_file)")  # fmt: skip
        allowed = {k.lower(): k for k in SSH_OPTIONS}
        if key.lower() not in allowed:
            raise ConfigError(f"key 'ssh_options': daemon {name!r}: option {key!r} is not allowed (allowed: "
                              f"{', '.join(sorted(SSH_OPTIONS))}; none that runs a program)")  # fmt: skip
        if not value.strip() or any(ord(c) < 32 for c in value):
            raise ConfigError(f"key 'ssh_options': daemon {name!r}: {key} needs a value on one line")


def check_token(token: str, whose: str) -> None:
    """Refuse a bearer token that cannot go in an HTTP header as it is: printable ASCII only (no CR, LF, tab
    or other control character, which would end the header or inject another; nothing an HTTP client
    cannot encode)."""
    bad = next((c for c in token if not " " <= c <= "~"), None)
    if bad is not None:
        raise ConfigError(f"key 'token': {whose}: the token holds {bad!r}: expected printable ASCII only "
                          "(it is sent in an Authorization header)")  # fmt: skip


def _check_url(name: str, url: str) -> None:
    """An http(s) URL of a daemon's root whose host and port parse (a port in 1..65535), with no query or
    fragment (the fleet appends its own paths and queries) and no control character or space."""
    problem = f"daemon {name!r}: expected http(s)://host:port, got {url!r}"
    if "?" in url or "#" in url:
        raise ConfigError(f"key 'url': {problem} (a daemon's URL takes no ?query or #fragment)")
    if any(ord(c) <= 32 or 127 <= ord(c) < 160 for c in url):
        raise ConfigError(f"key 'url': {problem} (a URL holds no space or control character)")
    try:
        parts = urlsplit(url)
        port = parts.port  # raises ValueError for a port out of range or not a number
    except ValueError as exc:
        raise ConfigError(f"key 'url': {problem} ({exc})") from None
    ok = parts.scheme in ("http", "https") and bool(parts.hostname) and parts.path in ("", "/")
    _check(ok and (port is None or port > 0), "url", problem)


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
