"""Deploying, stopping and restarting daemons on other hosts, over the fleet's SSH connections.

``deploy`` installs the fleet's own prooflane on a host and starts a daemon there:

1. a wheel of the running prooflane (:mod:`.wheel`) is copied into the daemon's folder on the host
   (``deploy_dir``, by default ``.prooflane/NAME`` in the SSH user's home), through ``ssh`` standard input.
   The folder is the daemon's for good (:data:`OWNER_LINK`): a deploy of another name into it, or into
   the folder of another daemon the fleet follows, is refused (:class:`FolderTaken`) before anything in it
   changes;
2. what the last deploy into the folder used (``deploy.json``: the host's ``python``, the pip arguments
   and the daemon's config keys) is kept where this deploy does not say otherwise, and a daemon the folder
   already runs is stopped (``prooflane service stop``: it waits until no process of
   it is left and its port is free) -- so deploying again is the upgrade;
3. a venv is made there with the host's ``python`` (kept when it exists), and the wheel is installed into
   it with ``pip install PIP_ARGS WHEEL`` (``--no-index --find-links DIR`` for a host without internet);
4. the daemon's config is written (``prooflane.toml``: 127.0.0.1, its port, its token, its data folder,
   and the keys given), and ``deploy.json`` beside it;
   The wheel carries the C extension built for the fleet's platform and is tagged for it
   (:mod:`.wheel`): where pip refuses it (another Python or platform), the pure wheel is sent and installed
   instead. Either way the host's prooflane is then asked which arithmetic proves each curve there, and a
   host on the libraries (the slower path) is said in one line: in the deploy's answer (``arithmetic_note``,
   printed by ``prooflane fleet deploy``) and the fleet's log;
5. ``prooflane service start`` starts it under a detached supervisor and waits until its ``/healthz``
   says it can work; then the fleet asks it itself, at the port it was given and through the tunnel the
   fleet will follow it by, with its token;
6. the folder is claimed (:mod:`.claim`: a new random id in ``.prooflane-claim``) and the fleet follows the
   daemon (through its SSH tunnel), saved in the fleet's config with its ``deploy_dir`` and that id.

``stop`` and ``restart`` run the folder's ``venv/bin/prooflane`` only in the same shell line that finds the
claim there and the folder the SSH user's alone (:func:`.claim.guarded`); every program a deploy runs from
the folder (the earlier daemon's stop, pip, the start) is run after the second of those checks.

Every command sent is one line whose words are quoted (:func:`shlex.quote`); a step that fails raises
:class:`DeployError` with one line: what failed, and the last lines the host wrote.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import secrets
import shlex
import tempfile
import time
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import httpx

from ..config import Config
from ..errors import ConfigError, TunnelError
from ..logs import one_line
from ..status.readout import arithmetic_warnings
from . import claim
from .claim import FolderRefused
from .config import DEFAULT_DAEMON_PORT, DaemonSpec, dump_toml
from .ssh import RemoteResult
from .wheel import PURE_TAG, build_wheel, wheel_tag

if TYPE_CHECKING:
    from .service import Fleet

__all__ = [
    "DeployError",
    "DeployRequest",
    "FolderRefused",
    "NotDeployed",
    "OperationBusy",
    "arithmetic_note",
    "deploy",
    "restart",
    "stop",
]

log = logging.getLogger("prooflane.fleet")
T = TypeVar("T")

_TAIL_LINES = 3  # the host's last lines quoted in a failure
_CONTROL_SECS = 120.0  # bound on the quick remote steps (copy, venv check, config, stop)
# Keys of the daemon's config the deploy sets itself: the daemon listens on loopback, reached by the tunnel.
_OWN_KEYS = frozenset({"host", "port", "token", "data_dir"})
OWNER_LINK = ".prooflane-daemon"
"""In a deploy folder: a symbolic link whose target is the name of the daemon deployed there. Made by the
first deploy into the folder (``ln -s`` makes it, or fails, at once: two deploys cannot both make it) and
kept; a deploy of another name into the folder is refused."""
_TAKEN_EXIT = 73  # the copy step's exit status when the folder is another daemon's
_UNSUPPORTED = "is not a supported wheel on this platform"  # what pip says of a wheel tagged for another
# The host's prooflane, asked which arithmetic proves each curve there (what its daemon will run).
_ARITHMETIC = "import json, prooflane.groth16 as g; print(json.dumps(g.arithmetics()))"


class DeployError(Exception):
    """Raised when a step of a deploy, stop or restart fails; the message is one line saying why."""


class OperationBusy(Exception):
    """Raised when a deploy, stop or restart of the same daemon is already under way."""


class FolderTaken(Exception):
    """Raised when a deploy names a folder that another daemon was deployed into (on that host)."""


class NotDeployed(Exception):
    """Raised when a stop or restart names a daemon the fleet follows but did not deploy (no
    ``deploy_dir``), or deployed before it kept claims (no ``deploy_claim``)."""


@dataclass(frozen=True)
class DeployRequest:
    """What ``POST /fleet/daemons/{name}/deploy`` takes (and ``prooflane fleet deploy`` sends).

    ``config`` holds keys of the daemon's own config (docs/config.md: ``devices``, ``profile``, ...), but not
    ``host``, ``port``, ``token`` or ``data_dir``, which the deploy sets. An empty ``token`` is the daemon's
    earlier one on a redeploy, else a new random one. ``python``, ``pip_args`` and ``config`` left at None
    are what the last deploy into the same folder used (kept there in ``deploy.json``), else ``python3``,
    none and none: an upgrade keeps the daemon's devices, budget and offline install as they were.
    """

    name: str
    ssh: str = ""
    ssh_options: tuple[str, ...] = ()
    remote_port: int = DEFAULT_DAEMON_PORT
    token: str = ""
    deploy_dir: str = ""
    python: str | None = None
    pip_args: tuple[str, ...] | None = None
    config: Mapping[str, Any] | None = None
    cost_per_hour: float | None = None

    @classmethod
    def from_dict(cls, name: str, values: Mapping[str, Any], before: DaemonSpec | None) -> DeployRequest:
        """Build from a JSON body; keys left out come from ``before`` (the daemon as deployed last)."""
        known = {f.name for f in dataclasses.fields(cls)} - {"name"}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"deploy: unknown key {unknown[0]!r} (expected {', '.join(sorted(known))})")
        kept: dict[str, Any] = {}
        if before is not None and before.ssh:
            kept = {"ssh": before.ssh, "ssh_options": before.ssh_options, "remote_port": before.remote_port,
                    "token": before.token, "deploy_dir": before.deploy_dir,
                    "cost_per_hour": before.cost_per_hour}  # fmt: skip
        merged = {**kept, **{k: v for k, v in values.items() if v is not None}}
        for key in ("ssh_options", "pip_args"):
            if key not in merged:
                continue
            given = merged[key]
            if not isinstance(given, list | tuple) or not all(isinstance(x, str) for x in given):
                raise ConfigError(f"deploy: key {key!r}: expected a list of strings")
            merged[key] = tuple(given)
        if not isinstance(merged.get("config", {}), Mapping):
            raise ConfigError("deploy: key 'config': expected a table of daemon config keys")
        if not isinstance(merged.get("python", ""), str):
            raise ConfigError("deploy: key 'python': expected the host's Python 3 (a name or a path)")
        request = cls(name=name, **merged)
        request.check()
        return request

    def check(self) -> None:
        """Refuse what cannot be deployed, naming the key (before anything is sent to the host)."""
        if not self.ssh:
            raise ConfigError("deploy: key 'ssh': expected [user@]host (the daemon is deployed over SSH)")
        self.spec("/checked")  # the daemon's own checks: name, ssh target and options, port, cost
        for key, value in (("deploy_dir", self.deploy_dir), ("python", self.python or "")):
            if any(ord(c) < 32 for c in value):
                raise ConfigError(f"deploy: key {key!r}: expected one line")
        if self.python is not None and not self.python.strip():
            raise ConfigError("deploy: key 'python': expected the host's Python 3 (a name or a path)")
        taken = sorted(_OWN_KEYS & set(self.config or {}))
        if taken:
            raise ConfigError(f"deploy: config key {taken[0]!r} is set by the deploy itself")
        self.daemon_config("/checked")

    def settled(self, earlier: Mapping[str, Any]) -> DeployRequest:
        """With what the last deploy into the folder used (its ``deploy.json``) where this one says
        nothing, and the defaults where neither does; checked again."""
        python = self.python if self.python is not None else earlier.get("python")
        pip_args = self.pip_args if self.pip_args is not None else earlier.get("pip_args")
        config = self.config if self.config is not None else earlier.get("config")
        if not isinstance(python, str) or not python.strip():
            python = "python3"
        if not isinstance(pip_args, list | tuple) or not all(isinstance(a, str) for a in pip_args):
            pip_args = ()
        if not isinstance(config, Mapping):
            config = {}
        settled = dataclasses.replace(self, python=python, pip_args=tuple(pip_args), config=dict(config))
        settled.check()
        return settled

    def record(self) -> str:
        """The folder's ``deploy.json``: what the next deploy into it keeps unless told otherwise."""
        return json.dumps({"python": self.python, "pip_args": list(self.pip_args or ()),
                           "config": dict(self.config or {})}, indent=1)  # fmt: skip

    @property
    def folder(self) -> str:
        """The daemon's folder on the host (relative: to the SSH user's home)."""
        return self.deploy_dir or f".prooflane/{self.name}"

    def spec(self, absolute_dir: str, deploy_claim: str = "") -> DaemonSpec:
        """The fleet's entry for the deployed daemon."""
        return DaemonSpec(name=self.name, ssh=self.ssh, remote_port=self.remote_port,
                          ssh_options=self.ssh_options, token=self.token, cost_per_hour=self.cost_per_hour,
                          deploy_dir=absolute_dir, deploy_claim=deploy_claim)  # fmt: skip

    def daemon_config(self, absolute_dir: str) -> str:
        """The daemon's ``prooflane.toml``, checked by the daemon's own config rules."""
        values = {**(self.config or {}), "host": "127.0.0.1", "port": self.remote_port, "token": self.token,
                  "data_dir": f"{absolute_dir}/data"}  # fmt: skip
        Config.from_dict(dict(values), source="deploy: config")
        return dump_toml(values, [])


def _q(*words: str) -> str:
    return " ".join(shlex.quote(w) for w in words)


def _tail(result: RemoteResult) -> str:
    """The last lines of what the host wrote: its standard error (where pip writes why) if anything."""
    said = result.err if result.err.strip() else result.out
    lines = [line.strip() for line in said.splitlines() if line.strip()]
    return one_line("\n".join(lines[-_TAIL_LINES:])) or f"exit {result.code}, nothing written"


def _last(result: RemoteResult) -> str:
    lines = [line.strip() for line in (result.out + "\n" + result.err).splitlines() if line.strip()]
    return lines[-1] if lines else f"exit {result.code}"


class _Remote:
    """One daemon's host, for the steps of an operation: each step a command over the fleet's tunnels."""

    def __init__(self, fleet: Fleet, spec: DaemonSpec) -> None:
        self.fleet = fleet
        self.spec = spec

    async def run(self, what: str, command: str, *, stdin: bytes = b"", within: float) -> RemoteResult:
        try:
            return await self.fleet.tunnels.run(self.spec, command, stdin=stdin, within=within)
        except TunnelError as exc:
            raise DeployError(f"{self.spec.name}: {what}: {exc}") from None

    async def run_in(self, what: str, folder: str, command: str, *, within: float, claim_id: str | None = None
                     ) -> RemoteResult:  # fmt: skip
        """``command`` run in ``folder`` after the checks of :func:`.claim.guarded` (the claim's when
        ``claim_id`` is given); :class:`FolderRefused` when they fail (nothing was run)."""
        line, stdin = claim.guarded(folder, command, claim_id)
        result = await self.run(what, line, stdin=stdin, within=within)
        refused = claim.refusal(result, name=self.spec.name, host=self.spec.ssh, folder=folder)
        if refused is not None:
            raise FolderRefused(refused)
        return result

    async def service(self, folder: str, verb: str, *args: str, within: float, claim_id: str | None = None
                      ) -> str:  # fmt: skip
        """``prooflane service VERB --dir FOLDER`` with the folder's own prooflane (guarded: :meth:`run_in`);
        its one line."""
        command = f"venv/bin/prooflane service {verb} --dir . {_q(*args)}"
        result = await self.run_in(f"service {verb}", folder, command, within=within, claim_id=claim_id)
        if result.code != 0:
            raise DeployError(f"{self.spec.name}: {verb} on {self.spec.ssh} failed: {_last(result)}")
        return _last(result)


def _begin(fleet: Fleet, name: str) -> None:
    if name in fleet.operations:
        raise OperationBusy(f"a deploy, stop or restart of {name!r} is already under way")
    fleet.operations.add(name)
    fleet.stopped.pop(name, None)  # whatever it does now, it is no longer a daemon the fleet left stopped


async def deploy(fleet: Fleet, request: DeployRequest) -> dict[str, Any]:
    """Install and start the daemon on its host, then follow it; ``{"name", "where", "deploy_dir",
    "version", "started", "arithmetic", "arithmetic_note"}`` (``arithmetic``: curve -> what proves it on
    the host, as its ``/status`` says; ``arithmetic_note``: one line when the host proves on the libraries,
    else None). Raises :class:`DeployError` naming the step that failed."""
    if not request.token:
        request = dataclasses.replace(request, token=secrets.token_urlsafe(24))
    _begin(fleet, request.name)
    try:
        return await _logged("deploy", request.name, request.ssh, _deploy(fleet, request))
    finally:
        fleet.operations.discard(request.name)


async def _deploy(fleet: Fleet, request: DeployRequest) -> dict[str, Any]:
    remote = _Remote(fleet, request.spec(""))
    limit = fleet.config.deploy_timeout_secs
    _refuse_taken(fleet, request, request.folder)
    where = f"mkdir -p {_q(request.folder)}/wheels && cd {_q(request.folder)} && pwd"
    result = await remote.run("making the folder", where, within=_CONTROL_SECS)
    if result.code != 0 or not result.out.strip():
        raise DeployError(f"{request.name}: cannot make the folder {request.ssh}:{request.folder}: "
                          f"{_tail(result)}")  # fmt: skip
    folder = result.out.strip().splitlines()[-1]
    _refuse_taken(fleet, request, folder)  # by its absolute path, as the fleet keeps it
    with tempfile.TemporaryDirectory(prefix="plwheel-") as built:
        wheel = await asyncio.to_thread(build_wheel, Path(built))  # hashes and zips the package: off the loop
        owner, name = _q(OWNER_LINK), _q(request.name)
        claim = (f'{{ ln -s {name} {owner} 2>/dev/null || [ "$(readlink {owner})" = {name} ] || '
                 f'{{ readlink {owner}; exit {_TAKEN_EXIT}; }}; }}')  # fmt: skip
        copy = (f"cd {_q(folder)} && {claim} && "
                f"cat > wheels/.upload && mv wheels/.upload wheels/{_q(wheel.name)}")  # fmt: skip
        result = await remote.run("copying the wheel", copy, stdin=wheel.read_bytes(), within=limit)
    if result.code == _TAKEN_EXIT:
        raise FolderTaken(_taken(request, folder, _last(result)))
    if result.code != 0:
        raise DeployError(f"{request.name}: cannot copy the wheel to {request.ssh}:{folder}: {_tail(result)}")
    request = request.settled(await _earlier(remote, folder))
    await _stop_if_running(remote, folder)
    python = _q(request.python or "python3")
    venv = f"cd {_q(folder)} && {{ [ -x venv/bin/python ] || {python} -m venv venv; }}"
    result = await remote.run("making the venv", venv, within=limit)
    if result.code != 0:
        raise DeployError(f"{request.name}: cannot make a venv with {request.python} on {request.ssh}: "
                          f"{_tail(result)}")  # fmt: skip
    wheel_name, refused = wheel.name, None
    result = await _pip_install(remote, request, folder, wheel_name, limit)
    if result.code != 0 and _UNSUPPORTED in result.out + result.err and wheel_tag() != PURE_TAG:
        refused = wheel_tag()  # the host's Python or platform is not the one the C extension was built for
        wheel_name = await _send_pure_wheel(remote, request, folder, limit)
        result = await _pip_install(remote, request, folder, wheel_name, limit)
    if result.code != 0:
        raise DeployError(f"{request.name}: pip install on {request.ssh} failed (exit {result.code}): "
                          f"{_tail(result)}")  # fmt: skip
    arithmetic = await _host_arithmetic(remote, folder)
    note = arithmetic_note(request.name, request.ssh, arithmetic, refused)
    if note is not None:
        log.warning("%s", note, extra={"daemon": request.name, "host": request.ssh, "arithmetic": arithmetic})
    for file, text in (("prooflane.toml", request.daemon_config(folder)), ("deploy.json", request.record())):
        new = _q(f".{file}.new")
        write = f"cd {_q(folder)} && umask 077 && cat > {new} && mv {new} {_q(file)}"
        result = await remote.run("writing the config", write, stdin=text.encode(), within=_CONTROL_SECS)
        if result.code != 0:
            raise DeployError(f"{request.name}: cannot write {folder}/{file}: {_tail(result)}")
    healthy = fleet.config.deploy_healthy_secs
    started = await remote.service(folder, "start", "--wait", str(healthy), within=healthy + _CONTROL_SECS)
    await _answers_as_deployed(fleet, request.spec(folder))
    spec = request.spec(folder, await _claim_folder(remote, folder))
    await fleet.put(spec)
    version = wheel_name.split("-")[1]
    return {"name": spec.name, "where": spec.where, "deploy_dir": folder, "version": version,
            "started": started, "arithmetic": arithmetic, "arithmetic_note": note}  # fmt: skip


async def _claim_folder(remote: _Remote, folder: str) -> str:
    """Write a new claim into ``folder`` (0600, replacing the last deploy's); its id, for the fleet's
    config."""
    claim_id = claim.new()
    new = _q(f"{claim.CLAIM_FILE}.new")
    write = f"cd {_q(folder)} && umask 077 && cat > {new} && mv -f {new} {_q(claim.CLAIM_FILE)}"
    result = await remote.run("claiming the folder", write, stdin=claim_id.encode(), within=_CONTROL_SECS)
    if result.code != 0:
        raise DeployError(f"{remote.spec.name}: cannot write {folder}/{claim.CLAIM_FILE}: {_tail(result)}")
    return claim_id


def _refuse_taken(fleet: Fleet, request: DeployRequest, folder: str) -> None:
    """``FolderTaken`` when another daemon the fleet follows was deployed into ``folder`` on that host."""
    for other in fleet.followers.values():
        spec = other.spec
        if (
            spec.name != request.name
            and spec.ssh == request.ssh
            and spec.deploy_dir in (folder, request.folder)
        ):
            raise FolderTaken(_taken(request, folder, spec.name))


def _taken(request: DeployRequest, folder: str, owner: str) -> str:
    return (f"{request.name}: the folder {folder} on {request.ssh} holds daemon {owner!r} (deployed there): "
            f"deploy {request.name!r} into another folder (--dir), or deploy {owner!r} again")  # fmt: skip


async def _answers_as_deployed(fleet: Fleet, spec: DaemonSpec) -> None:
    """The daemon the fleet will follow answers where the fleet will look (its port, through the host's
    tunnel) and is the one just started: ``/healthz`` 200, and its token is taken (each deploy has its own),
    else ``DeployError`` (nothing is followed)."""
    try:
        socket = await fleet.tunnels.socket_for(spec)
        transport = httpx.AsyncHTTPTransport(uds=str(socket))
        headers = {"Authorization": f"Bearer {spec.token}"}
        async with httpx.AsyncClient(base_url="http://localhost", transport=transport, headers=headers,
                                     timeout=_CONTROL_SECS) as client:  # fmt: skip
            health = await client.get("/healthz")
            ours = await client.get("/v1/logs", params={"lines": 1})
    except (TunnelError, httpx.HTTPError) as exc:
        raise DeployError(f"{spec.name}: started, but nothing answers at port {spec.remote_port} on "
                          f"{spec.ssh} through the fleet's tunnel: {exc}") from None  # fmt: skip
    if health.status_code != 200 or ours.status_code != 200:
        said = f"/healthz {health.status_code}, its token {ours.status_code}"
        raise DeployError(f"{spec.name}: started, but what answers at port {spec.remote_port} on {spec.ssh} "
                          f"is not it ({said})")  # fmt: skip


async def _pip_install(remote: _Remote, request: DeployRequest, folder: str, wheel: str, limit: float
                       ) -> RemoteResult:  # fmt: skip
    pip = (f"venv/bin/python -m pip install --disable-pip-version-check --no-input "
           f"{_q(*(request.pip_args or ()))} {_q('wheels/' + wheel)}")  # fmt: skip
    return await remote.run_in("pip install", folder, pip, within=limit)


async def _send_pure_wheel(remote: _Remote, request: DeployRequest, folder: str, limit: float) -> str:
    """Copy the wheel without the C extension (``py3-none-any``) into ``folder``; its name."""
    with tempfile.TemporaryDirectory(prefix="plwheel-") as built:
        wheel = await asyncio.to_thread(build_wheel, Path(built), extension=False)
        copy = f"cd {_q(folder)} && cat > wheels/.upload && mv wheels/.upload wheels/{_q(wheel.name)}"
        result = await remote.run("copying the wheel", copy, stdin=wheel.read_bytes(), within=limit)
    if result.code != 0:
        raise DeployError(f"{request.name}: cannot copy the wheel to {request.ssh}:{folder}: {_tail(result)}")
    return wheel.name


async def _host_arithmetic(remote: _Remote, folder: str) -> dict[str, str] | None:
    """Which arithmetic proves each curve with the prooflane just installed in ``folder`` (None when it
    does not say: the deploy goes on, the daemon's ``/status`` will)."""
    ask = f"venv/bin/python -c {_q(_ARITHMETIC)}"
    result = await remote.run_in("asking the host's arithmetic", folder, ask, within=_CONTROL_SECS)
    try:
        found = json.loads(result.out.strip().splitlines()[-1]) if result.code == 0 else None
    except (ValueError, IndexError):
        found = None
    if not isinstance(found, dict) or not all(isinstance(v, str) for v in found.values()):
        return None
    return {str(k): v for k, v in found.items()}


def arithmetic_note(name: str, host: str, arithmetic: Mapping[str, str] | None, refused: str | None
                    ) -> str | None:  # fmt: skip
    """One line when the deployed daemon will prove on the libraries (the slower path), else None.

    ``refused``: the tag of the fleet's wheel when pip refused it there (the pure wheel was installed)."""
    if refused is not None:
        return (f"{name} on {host} will prove on the libraries, the slower arithmetic: pip refused the "
                f"fleet's C extension (built for {refused}) there")  # fmt: skip
    if arithmetic is None:
        return None
    warnings = arithmetic_warnings(arithmetic)
    return f"{name} on {host}: {'; '.join(warnings)}" if warnings else None


async def _earlier(remote: _Remote, folder: str) -> dict[str, Any]:
    """What the last deploy into ``folder`` used (its ``deploy.json``), or nothing."""
    read = f"cd {_q(folder)} && if [ -f deploy.json ]; then cat deploy.json; fi"
    result = await remote.run("reading the last deploy's settings", read, within=_CONTROL_SECS)
    try:
        found = json.loads(result.out) if result.code == 0 and result.out.strip() else {}
    except ValueError:
        found = {}
    return found if isinstance(found, dict) else {}


async def _stop_if_running(remote: _Remote, folder: str) -> None:
    """Stop the daemon an earlier deploy started in ``folder`` (nothing when there is none)."""
    check = f"cd {_q(folder)} && [ -x venv/bin/prooflane ] && [ -f prooflane.toml ]"
    result = await remote.run("looking for an earlier daemon", check, within=_CONTROL_SECS)
    if result.code == 0:
        await remote.service(folder, "stop", "--wait", "60", within=60 + _CONTROL_SECS)


def _deployed(fleet: Fleet, name: str) -> DaemonSpec:
    found = fleet.followers.get(name)
    if found is None:
        raise KeyError(name)
    spec = found.spec
    if not spec.deploy_dir:
        raise NotDeployed(f"{name}: not deployed by the fleet (no deploy_dir): stop and restart it on its "
                          "host")  # fmt: skip
    if not spec.deploy_claim:
        raise NotDeployed(f"{name}: the fleet holds no claim on its folder {spec.deploy_dir} on {spec.ssh} "
                          "(no deploy_claim: deployed before the fleet kept claims): nothing was run there; "
                          f"deploy {name!r} again to claim it")  # fmt: skip
    return spec


async def stop(fleet: Fleet, name: str) -> str:
    """Stop a deployed daemon; returns the host's one line once no process of it is left and its port is
    free (the fleet goes on following it: it shows unreachable until started again)."""
    spec = _deployed(fleet, name)
    _begin(fleet, name)
    try:
        stopping = _Remote(fleet, spec).service(spec.deploy_dir, "stop", "--wait", "60",
                                                within=60 + _CONTROL_SECS,
                                                claim_id=spec.deploy_claim)  # fmt: skip
        said = await _logged("stop", name, spec.ssh, stopping)
        fleet.stopped[name] = time.time()  # on purpose: its row says so, not just "unreachable"
        return said
    finally:
        fleet.operations.discard(name)


async def restart(fleet: Fleet, name: str) -> str:
    """Stop a deployed daemon (as :func:`stop` waits), start it again and wait for its ``/healthz``."""
    spec = _deployed(fleet, name)
    healthy = fleet.config.deploy_healthy_secs
    _begin(fleet, name)
    try:
        restarting = _Remote(fleet, spec).service(spec.deploy_dir, "restart", "--wait", str(healthy),
                                                  within=healthy + 60 + _CONTROL_SECS,
                                                  claim_id=spec.deploy_claim)  # fmt: skip
        return await _logged("restart", name, spec.ssh, restarting)
    finally:
        fleet.operations.discard(name)


async def _logged(verb: str, name: str, host: str, operation: Awaitable[T]) -> T:
    """Run ``operation``; one log line when it is done (with how long it took) or failed (with why)."""
    started = time.monotonic()
    fields = {"daemon": name, "host": host, "operation": verb}
    try:
        done = await operation
    except (DeployError, FolderRefused) as exc:
        log.warning("%s of daemon %s on %s failed: %s", verb, name, host, exc,
                    extra={**fields, "ok": False, "reason": str(exc)})  # fmt: skip
        raise
    secs = time.monotonic() - started
    log.info("%s of daemon %s on %s done in %.1f s", verb, name, host, secs,
             extra={**fields, "ok": True, "duration_secs": round(secs, 3)})  # fmt: skip
    return done
