"""SSH tunnels to daemons on other machines, through the system ``ssh`` client.

One master connection per host (``ControlMaster``; a host is an ssh target with its options), started and
owned by the fleet service; each daemon on that host is one forward added to the master with
``ssh -O forward``: a Unix socket in the fleet's private folder that leads to 127.0.0.1:<remote_port> on the
far machine. The fleet then speaks HTTP over that socket. ``BatchMode`` is always on: a host that would ask
for a password or a host key confirmation fails with ssh's own message instead of hanging.

The options that would make ssh write on the fleet's machine are pinned, before the daemon's own options
(ssh keeps the first value it is given): ``StrictHostKeyChecking=yes`` and ``UpdateHostKeys=no`` (no
known-hosts line is ever added or changed: an unknown host fails), and ``UserKnownHostsFile`` when the
fleet's config names one (:data:`~.config.PINNED_SSH_OPTIONS`; a daemon's ``ssh_options`` cannot name them).

All state here is touched only on the event loop (no locks); ``_Master.lock`` only serializes the ssh
commands of one host, which await.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import TunnelError
from .config import DaemonSpec

__all__ = ["RemoteResult", "SshTunnels"]

_CHECK_INTERVAL_SECS = 0.1


@dataclass
class _Master:
    target: str
    options: tuple[str, ...]
    control: Path
    process: asyncio.subprocess.Process | None = None
    forwards: dict[str, tuple[Path, int]] = field(default_factory=dict)  # daemon name -> (socket, port)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None


@dataclass(frozen=True)
class RemoteResult:
    """What one command run on a host over SSH gave: its exit status and its two outputs, as text."""

    code: int
    out: str
    err: str


class SshTunnels:
    """The fleet's SSH masters and forwards; :meth:`socket_for` opens what a daemon needs, once."""

    def __init__(self, timeout_secs: float, ssh: str = "ssh", known_hosts_file: str = "") -> None:
        self.timeout_secs = timeout_secs
        self.ssh = ssh
        self.pinned = ["-o", "StrictHostKeyChecking=yes", "-o", "UpdateHostKeys=no"]
        if known_hosts_file:
            self.pinned += ["-o", f"UserKnownHostsFile={known_hosts_file}"]
        self._folder: Path | None = None
        self._masters: dict[tuple[str, tuple[str, ...]], _Master] = {}

    @property
    def folder(self) -> Path:
        """A private folder (0700) for control and forward sockets, short enough for Unix socket paths."""
        if self._folder is None:
            self._folder = Path(tempfile.mkdtemp(prefix="plfleet-"))
        return self._folder

    def masters(self) -> int:
        """How many master connections are alive (one per host in use)."""
        return sum(1 for m in self._masters.values() if m.alive)

    async def socket_for(self, spec: DaemonSpec) -> Path:
        """The local socket that leads to ``spec``'s daemon; starts the host's master and the forward if
        needed. Raises :class:`TunnelError` with ssh's message when either cannot be made."""
        master = self._master(spec)
        async with master.lock:
            if not master.alive:
                await self._start(master)
            known = master.forwards.get(spec.name)
            if known is not None and known[1] == spec.remote_port and known[0].exists():
                return known[0]
            path = self.folder / f"d-{_digest(spec.name)}.sock"
            path.unlink(missing_ok=True)
            await self._control(master, "forward", f"{path}:127.0.0.1:{spec.remote_port}")
            master.forwards[spec.name] = (path, spec.remote_port)
            return path

    async def run(self, spec: DaemonSpec, command: str, *, stdin: bytes = b"", within: float) -> RemoteResult:
        """Run ``command`` (one line for the remote shell, its words quoted by the caller) on ``spec``'s host
        over the host's master connection (started if needed), with ``stdin``; bounded by ``within`` seconds.
        Raises :class:`TunnelError` when the host cannot be reached or the command does not end in time."""
        master = self._master(spec)
        async with master.lock:
            if not master.alive:
                await self._start(master)
        done = await asyncio.create_subprocess_exec(
            *self._base(master), master.target, command,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )  # fmt: skip
        try:
            async with asyncio.timeout(within):
                out, err = await done.communicate(stdin)
        except TimeoutError:
            done.kill()
            await done.wait()
            raise TunnelError(f"ssh {master.target}: the command did not end in {within:.0f} s") from None
        code = done.returncode if done.returncode is not None else -1
        if code == 255:  # ssh's own failure (the connection), not the command's
            why = err.decode(errors="replace").strip().splitlines()
            raise TunnelError(f"ssh to {master.target} failed: {why[-1] if why else 'exit 255'}")
        return RemoteResult(code, out.decode(errors="replace"), err.decode(errors="replace"))

    async def forget(self, spec: DaemonSpec) -> None:
        """Drop ``spec``'s forward; end the host's master when no daemon uses it any more."""
        master = self._masters.get((spec.ssh, spec.ssh_options))
        if master is None:
            return
        async with master.lock:
            known = master.forwards.pop(spec.name, None)
            if known is not None and master.alive:
                with contextlib.suppress(TunnelError):
                    await self._control(master, "cancel", f"{known[0]}:127.0.0.1:{known[1]}")
                known[0].unlink(missing_ok=True)
            if not master.forwards:
                await self._stop(master)
                del self._masters[(spec.ssh, spec.ssh_options)]

    async def close(self) -> None:
        """End every master and remove the private folder."""
        for master in list(self._masters.values()):
            await self._stop(master)
        self._masters.clear()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    def _master(self, spec: DaemonSpec) -> _Master:
        key = (spec.ssh, spec.ssh_options)
        if key not in self._masters:
            control = self.folder / f"m-{_digest(spec.ssh, *spec.ssh_options)}"
            self._masters[key] = _Master(spec.ssh, spec.ssh_options, control)
        return self._masters[key]

    def _base(self, master: _Master) -> list[str]:
        return [self.ssh, "-o", "BatchMode=yes", *self.pinned, "-o", f"ControlPath={master.control}",
                *master.options]  # fmt: skip

    async def _start(self, master: _Master) -> None:
        """Start the host's master connection and wait until it answers ``ssh -O check``."""
        await self._stop(master)
        master.forwards.clear()
        connect = max(1, round(self.timeout_secs))
        command = [
            *self._base(master),
            "-o", "ControlMaster=yes", "-o", "ControlPersist=no", "-o", "ExitOnForwardFailure=yes",
            "-o", "StreamLocalBindUnlink=yes", "-o", f"ConnectTimeout={connect}",
            "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=2", "-N", master.target,
        ]  # fmt: skip
        master.process = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_secs + connect
        while loop.time() < deadline:
            if master.process.returncode is not None:
                break
            if await self._check(master):
                return
            await asyncio.sleep(_CHECK_INTERVAL_SECS)
        message = await self._stop(master)
        raise TunnelError(f"ssh to {master.target} failed: {message or 'no connection in time'}")

    async def _check(self, master: _Master) -> bool:
        check = await asyncio.create_subprocess_exec(
            *self._base(master), "-O", "check", master.target,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        return await check.wait() == 0

    async def _control(self, master: _Master, verb: str, spec: str) -> None:
        command = [*self._base(master), "-O", verb, "-L", spec, master.target]
        done = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            async with asyncio.timeout(self.timeout_secs):
                _, err = await done.communicate()
        except TimeoutError:
            done.kill()
            await done.wait()
            raise TunnelError(f"ssh -O {verb} to {master.target} did not answer in time") from None
        if done.returncode != 0:
            why = err.decode(errors="replace").strip()
            raise TunnelError(f"ssh -O {verb} to {master.target} failed: {why}")

    async def _stop(self, master: _Master) -> str:
        """End the master process (if any); return what it wrote to standard error."""
        process, master.process = master.process, None
        if process is None:
            return ""
        if process.returncode is None:
            process.terminate()
        try:
            async with asyncio.timeout(self.timeout_secs):
                _, err = await process.communicate()
        except TimeoutError:
            process.kill()
            _, err = await process.communicate()
        master.control.unlink(missing_ok=True)
        return (err or b"").decode(errors="replace").strip()


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]
