"""The daemons' logs, read through the fleet: each daemon's ``GET /v1/logs`` (the last lines of its log
file), asked with the daemon's own token over the way the fleet reaches it (a URL or the SSH tunnel), so it
works the same for every daemon the fleet follows, deployed by it or not."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from ..logs import MAX_TAIL_LINES, one_line
from .follower import FETCH_ERRORS, DaemonFollower, describe_failure

if TYPE_CHECKING:
    from .service import Fleet

__all__ = ["LogsUnavailable", "daemon_logs", "fleet_logs"]


class LogsUnavailable(Exception):
    """Raised when a daemon's log cannot be read; ``status`` is the HTTP code the fleet answers."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


async def daemon_logs(found: DaemonFollower, lines: int) -> dict[str, Any]:
    """``{"name", "file", "lines"}``: the daemon's last ``lines`` log lines, oldest first."""
    name = found.spec.name
    try:
        answer = await found.get("/v1/logs", {"lines": str(max(1, min(lines, MAX_TAIL_LINES)))})
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
    return {"name": name, "file": body.get("file"), "lines": list(body.get("lines") or [])}


async def _if_reachable(found: DaemonFollower, lines: int) -> dict[str, Any]:
    """:func:`daemon_logs`, unless the daemon's last attempt failed: then why, without asking it again (a
    daemon that does not answer must not hold the page's panel for ``timeout_secs``)."""
    if found.failures:
        raise LogsUnavailable(502, f"daemon {found.spec.name!r} is unreachable: {found.last_error}")
    return await daemon_logs(found, lines)


async def fleet_logs(fleet: Fleet, lines: int) -> dict[str, Any]:
    """Every daemon's last ``lines`` log lines, asked concurrently: ``{"daemons": {NAME: {"file",
    "lines", "error"}}}``, in config order; a daemon that cannot be read has its ``error`` and no lines (one
    that is unreachable is not asked: its error is why it is)."""
    followers = list(fleet.followers.values())
    answers = await asyncio.gather(*(_if_reachable(f, lines) for f in followers), return_exceptions=True)
    out: dict[str, Any] = {}
    for found, got in zip(followers, answers, strict=True):
        if isinstance(got, LogsUnavailable):
            out[found.spec.name] = {"file": None, "lines": [], "error": got.detail}
        elif isinstance(got, BaseException):
            raise got
        else:
            out[found.spec.name] = {"file": got["file"], "lines": got["lines"], "error": None}
    return {"daemons": out}
