"""What the clock alone moves in a ``GET /status`` document, and a document moved on by some seconds.

A snapshot's tag (``StatusSnapshot.tag``, the ``ETag`` of ``/status``) stays while nothing but the clock
moved. Then only these fields differ, each by exactly the seconds between the two (``CLOCK_FIELDS``): a
client that is answered 304 keeps its copy and calls :func:`advance` on it (the fleet does; the dashboard
adds the time since a snapshot came to these fields where it shows them). The daemon's RSS, sampled at each
encoding, moves too, and is not extrapolated.
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["CLOCK_FIELDS", "advance"]

CLOCK_FIELDS = (
    "taken_at",
    "uptime_secs",
    "journal_check.checked_secs_ago (once there was a check)",
    "workers[].busy_secs and workers[].busy_seconds_total (a worker with a current_job)",
    "workers[].last_restart_secs_ago (once it restarted)",
    "allocations[].last_used_secs_ago",
    "recent_jobs[].ended_secs_ago, recent_failures[].ended_secs_ago",
    "pipelines[].started_secs_ago",
    "pipelines[].elapsed_secs (a queued or running job)",
)
"""The fields that grow with the clock while the tag stays, in words."""

_GROWING = ("queued", "running")


def advance(doc: dict[str, Any], secs: float) -> dict[str, Any]:
    """A copy of the ``/status`` document ``doc`` as it reads ``secs`` seconds later, nothing else having
    happened (its tag unchanged): every field of ``CLOCK_FIELDS`` plus ``secs``."""
    out = copy.deepcopy(doc)
    _add(out, "taken_at", secs)
    _add(out, "uptime_secs", secs)
    _add(out.get("journal_check") or {}, "checked_secs_ago", secs)
    for worker in out.get("workers") or ():
        if worker.get("current_job") is not None:
            _add(worker, "busy_secs", secs)
            _add(worker, "busy_seconds_total", secs)
        _add(worker, "last_restart_secs_ago", secs)
    for allocation in out.get("allocations") or ():
        _add(allocation, "last_used_secs_ago", secs)
    for recent in (*(out.get("recent_jobs") or ()), *(out.get("recent_failures") or ())):
        _add(recent, "ended_secs_ago", secs)
    for job in out.get("pipelines") or ():
        _add(job, "started_secs_ago", secs)
        if job.get("state") in _GROWING:
            _add(job, "elapsed_secs", secs)
    return out


def _add(where: dict[str, Any], name: str, secs: float) -> None:
    value = where.get(name)
    if isinstance(value, int | float) and not isinstance(value, bool):
        where[name] = value + secs
