"""The daemons' logs, read through the fleet: each daemon's ``GET /v1/logs`` (the last lines of its log
file), asked with the daemon's own token over the way the fleet reaches it (a URL or the SSH tunnel), so it
works the same for every daemon the fleet follows, deployed by it or not.

A daemon that does not answer is when its log is most needed. Then the fleet reads the file itself over SSH
when it deployed the daemon (its folder's ``data/prooflane.log``, read only where the folder holds the
fleet's claim: :mod:`.claim`), or else serves the last lines it read of it, with their age. Each answer says
which (``source``: ``daemon``, ``ssh`` or ``fleet``).
"""

from __future__ import annotations

import asyncio
import shlex
import time
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import TunnelError
from ..logs import LOG_FILE_NAME, MAX_TAIL_LINES, one_line
from . import claim
from .follower import FETCH_ERRORS, DaemonFollower, describe_failure

if TYPE_CHECKING:
    from .service import Fleet

__all__ = ["LogsRead", "LogsUnavailable", "daemon_logs", "fleet_logs"]


class LogsUnavailable(Exception):
    """Raised when a daemon's log cannot be read; ``status`` is the HTTP code the fleet answers."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


@dataclass(frozen=True)
class LogsRead:
    """The last lines the fleet read of a daemon's log, oldest first, and when (Unix time)."""

    file: str | None
    lines: tuple[str, ...]
    read_at: float


_READ: weakref.WeakKeyDictionary[DaemonFollower, LogsRead] = weakref.WeakKeyDictionary()
"""The last lines read of each followed daemon (gone with its follower); touched only on the event loop (no
locks)."""


def _clamp(lines: int) -> int:
    return max(1, min(lines, MAX_TAIL_LINES))


async def _from_daemon(found: DaemonFollower, lines: int) -> dict[str, Any]:
    """The daemon's own ``/v1/logs``; :class:`LogsUnavailable` (502) with why when it cannot answer."""
    name = found.spec.name
    try:
        answer = await found.get("/v1/logs", {"lines": str(_clamp(lines))})
    except FETCH_ERRORS as exc:
        raise LogsUnavailable(502, f"daemon {name!r}: {describe_failure(exc)}") from None
    try:
        body = answer.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise LogsUnavailable(502, f"daemon {name!r}: /v1/logs answered {answer.status_code}, not JSON "
                                   "(not a prooflane daemon's answer)")  # fmt: skip
    if answer.status_code != 200:
        why = one_line(str(body.get("detail")))
        raise LogsUnavailable(502, f"daemon {name!r}: /v1/logs answered {answer.status_code}: {why}")
    file = body.get("file")
    got = [str(line) for line in body.get("lines") or []]
    _remember(found, file if isinstance(file, str) else None, got)
    return {"name": name, "file": file, "lines": got, "source": "daemon", "read_secs_ago": 0.0}


def _remember(found: DaemonFollower, file: str | None, lines: list[str]) -> None:
    before = _READ.get(found)
    if before is not None and before.file == file:
        lines = _joined(before.lines, lines)
    _READ[found] = LogsRead(file, tuple(lines[-MAX_TAIL_LINES:]), time.time())


def _joined(older: tuple[str, ...], newer: list[str]) -> list[str]:
    """``older`` followed by what ``newer`` adds to it, when ``newer`` starts within ``older`` and agrees
    with it from there (a short read after a long one keeps the long one's lines); else ``newer``."""
    if not newer:
        return list(older)
    for start in (i for i, line in enumerate(older) if line == newer[0]):
        overlap = older[start:]
        if tuple(newer[: len(overlap)]) == overlap:
            return [*older[:start], *newer] if len(newer) >= len(overlap) else list(older)
    return newer


async def _over_ssh(found: DaemonFollower, lines: int) -> dict[str, Any]:
    """The log file of a daemon the fleet deployed, read on its host with ``tail`` where its folder holds
    the fleet's claim."""
    spec = found.spec
    path = f"{spec.deploy_dir}/data/{LOG_FILE_NAME}"
    if not spec.deploy_claim:
        raise LogsUnavailable(502, f"daemon {spec.name!r}: not reading {path} over SSH: the fleet holds no "
                                   "claim on its folder (deploy it again to claim it)")  # fmt: skip
    command = f"tail -n {_clamp(lines)} -- {shlex.quote(f'data/{LOG_FILE_NAME}')}"
    line, stdin = claim.guarded(spec.deploy_dir, command, spec.deploy_claim)
    try:
        result = await found.tunnels.run(spec, line, stdin=stdin, within=max(found.config.timeout_secs, 10.0))
    except TunnelError as exc:
        raise LogsUnavailable(502, f"daemon {spec.name!r}: reading {path} over SSH: {exc}") from None
    refused = claim.refusal(result, name=spec.name, host=spec.ssh, folder=spec.deploy_dir)
    if refused is not None:
        raise LogsUnavailable(502, f"daemon {spec.name!r}: not reading {path} over SSH: {refused}")
    if result.code != 0:
        why = one_line(result.err.strip() or f"exit {result.code}")
        raise LogsUnavailable(502, f"daemon {spec.name!r}: reading {path} over SSH: {why}")
    return {"name": spec.name, "file": path, "lines": result.out.splitlines(), "source": "ssh",
            "read_secs_ago": 0.0}  # fmt: skip


def _kept(found: DaemonFollower, lines: int) -> dict[str, Any] | None:
    """The last lines read of the daemon, with their age; None when none was read."""
    read = _READ.get(found)
    if read is None:
        return None
    age = max(0.0, time.time() - read.read_at)
    return {"name": found.spec.name, "file": read.file, "lines": list(read.lines[-_clamp(lines) :]),
            "source": "fleet", "read_at": read.read_at, "read_secs_ago": age}  # fmt: skip


async def daemon_logs(found: DaemonFollower, lines: int) -> dict[str, Any]:
    """``{"name", "file", "lines", "source", "read_secs_ago"}``: the daemon's last ``lines`` log lines,
    oldest first. From the daemon while it answers; else over SSH for a daemon the fleet deployed; else the
    last lines the fleet read of it (``source`` "fleet", with ``read_at`` and ``error``: why not newer).
    :class:`LogsUnavailable` when none of these has any."""
    try:
        if found.failures:
            raise LogsUnavailable(502, f"daemon {found.spec.name!r} is unreachable: {found.last_error}")
        return await _from_daemon(found, lines)
    except LogsUnavailable as live:
        error = live
    if found.spec.ssh and found.spec.deploy_dir:
        try:
            return {**await _over_ssh(found, lines), "error": error.detail}
        except LogsUnavailable as exc:
            error = LogsUnavailable(502, f"{error.detail}; {exc.detail}")
    kept = _kept(found, lines)
    if kept is None:
        raise error
    return {**kept, "error": error.detail}


async def _if_reachable(found: DaemonFollower, lines: int) -> dict[str, Any]:
    """The daemon's own log lines, unless its last attempt failed: then why, and the lines last read of it,
    without asking it again (a daemon that does not answer must not hold the page's panel for
    ``timeout_secs``, nor start an SSH command every few seconds)."""
    if found.failures:
        why = f"daemon {found.spec.name!r} is unreachable: {found.last_error}"
        kept = _kept(found, lines)
        if kept is None:
            raise LogsUnavailable(502, why)
        return {**kept, "error": why}
    return await _from_daemon(found, lines)


async def fleet_logs(fleet: Fleet, lines: int) -> dict[str, Any]:
    """Every daemon's last ``lines`` log lines, asked concurrently: ``{"daemons": {NAME: {"file",
    "lines", "error", "source", "read_secs_ago"}}}``, in config order. A daemon that cannot be read has its
    ``error``; one that is unreachable is not asked (its error is why it is), and has the lines last read of
    it, if any (``source`` "fleet")."""
    followers = list(fleet.followers.values())
    answers = await asyncio.gather(*(_if_reachable(f, lines) for f in followers), return_exceptions=True)
    out: dict[str, Any] = {}
    for found, got in zip(followers, answers, strict=True):
        if isinstance(got, LogsUnavailable):
            out[found.spec.name] = {"file": None, "lines": [], "error": got.detail, "source": None,
                                    "read_secs_ago": None}  # fmt: skip
        elif isinstance(got, BaseException):
            raise got
        else:
            keep = ("file", "lines", "source", "read_secs_ago")
            out[found.spec.name] = {"error": got.get("error"), **{key: got[key] for key in keep}}
    return {"daemons": out}
