"""The engine's log lines: every job outcome, every worker death, restart and loss, every health change.

Each line is written from the one place where what it reports is decided (admission for an accepted or
resumed job, :meth:`Pipeline._end` for a job's end, the device loop's supervisor for workers) by one
function here, so its wording and fields have one home. Health is not decided in one place: it is read
out of the tracker and the engine's own reasons, so :class:`HealthLog` looks at it after every event that
may change it and on a timer (a stall, or a death the backend noticed before its event, has no event of
its own), and writes a line only when it turns bad or good again.

Lines are for people: the full job id and kind name (never cut), durations, partition counts, failure
reasons as the status view cleans them (:func:`prooflane.status.readable_reason`), on one line. The whole
raw reason of a failure goes to DEBUG (and the journal keeps it). Every line carries its facts as fields
(``extra``), which the JSON format writes out (:mod:`prooflane.logs`). docs/operations.md, "Logs", lists
them all.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import events as ev
from ..devices.backend import WorkerInfo
from ..kinds import CIRCOM
from ..logs import one_line
from ..states import JobState, PartitionState
from ..status import Health, readable_reason
from ..store import JobRecord
from .records import JobRun

__all__ = [
    "HEALTH_CHECK_SECS",
    "HealthLog",
    "job_admitted",
    "job_ended",
    "job_not_resumed",
    "jobs_resumed",
    "worker_died",
    "worker_lost",
    "worker_start_failed",
    "worker_started",
]

log = logging.getLogger("prooflane.engine")
health_log = logging.getLogger("prooflane.health")

HEALTH_CHECK_SECS = 2.0
"""How often health is looked at besides after events (how late a stall, say, is logged at most)."""

_WORKER_EVENTS = (ev.WorkerRegistered, ev.WorkerDied, ev.WorkerLost)


def _secs(secs: float) -> str:
    """A duration for people: ``0.42 s``, ``12.3 s``, ``14.2 min``, ``3.5 h``."""
    if secs < 10:
        return f"{secs:.2f} s"
    if secs < 600:
        return f"{secs:.1f} s"
    return f"{secs / 60:.1f} min" if secs < 36_000 else f"{secs / 3600:.1f} h"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _job(record: JobRecord) -> tuple[str, dict[str, Any]]:
    """``job ID (KIND, N partitions)`` and the fields of every job line."""
    circuit = record.request.get("circuit") if record.kind == CIRCOM else None
    kind = f"{record.kind} {circuit}" if circuit else record.kind
    fields = {"job_id": record.job_id, "kind": record.kind, "partitions": record.partitions}
    if circuit:
        fields["circuit"] = circuit
    return f"job {record.job_id} ({kind}, {_plural(record.partitions, 'partition')})", fields


def _reason(text: str) -> str:
    """A failure reason as the status view shows it, on one line."""
    return one_line(readable_reason(text))


# --- jobs -------------------------------------------------------------------------------------------


def job_admitted(job: JobRun, *, resumed: bool) -> None:
    """A job was accepted (``resumed``: taken again from the journal at start)."""
    said, fields = _job(job.record)
    fields |= {"priority": job.priority.value, "state": job.state.value}
    if not resumed:
        log.info("%s accepted", said, extra=fields | {"resumed": False})
        return
    proven = sum(p.state is PartitionState.DONE for p in job.partitions)
    log.info(
        "%s resumed from the journal: %d of %d proven already",
        said, proven, job.record.partitions, extra=fields | {"resumed": True, "proven": proven},
    )  # fmt: skip


def jobs_resumed(jobs: int, partitions: int, not_resumed: int) -> None:
    """The journal's unfinished jobs were taken again at start (nothing written when there were none)."""
    if not jobs and not not_resumed:
        return
    failed = f"; {not_resumed} could not be and failed" if not_resumed else ""
    log.info(
        "resumed %s from the journal (%s to prove)%s",
        _plural(jobs, "unfinished job"), _plural(partitions, "partition"), failed,
        extra={"jobs": jobs, "partitions": partitions, "not_resumed": not_resumed},
    )  # fmt: skip


def leftover_removed(folder: Path) -> None:
    """At start, an inline sector a killed daemon left (half built, or its job never journalled) was
    removed."""
    log.info("removed %s: an inline sector no job names (left by a daemon that was killed)", folder,
             extra={"path": str(folder)})  # fmt: skip


def job_not_resumed(record: JobRecord, reason: str) -> None:
    """An unfinished job of the journal cannot be taken again (its kind or circuit is gone): it failed."""
    said, fields = _job(record)
    log.warning(
        "%s failed: cannot resume it: %s", said, _reason(reason),
        extra=fields | {"state": JobState.FAILED.value, "reason": _reason(reason)},
    )  # fmt: skip


def job_ended(job: JobRun, state: JobState, error: str | None, partition: int | None) -> None:
    """The job ended (journalled): done (INFO), failed (WARNING, with the cleaned reason; the whole text at
    DEBUG), cancelled (INFO, with why)."""
    said, fields = _job(job.record)
    took = max(0.0, (job.finished_at or job.record.submitted_at) - job.record.submitted_at)
    proven = sum(p.state is PartitionState.DONE for p in job.partitions)
    fields |= {"state": state.value, "duration_secs": round(took, 3), "proven": proven}
    match state:
        case JobState.DONE:
            retried = sum(p.attempt - 1 for p in job.partitions)
            again = f" ({retried} {'retry' if retried == 1 else 'retries'})" if retried else ""
            log.info("%s done in %s%s", said, _secs(took), again, extra=fields | {"retries": retried})
        case JobState.FAILED:
            raw = error or "failed"
            reason = _reason(raw)
            log.warning(
                "%s failed after %s: %s", said, _secs(took), reason,
                extra=fields | {"reason": reason, "partition": partition},
            )  # fmt: skip
            if reason != raw:
                whole = {"job_id": job.job_id, "reason": raw}
                log.debug("job %s: the whole failure reason: %s", job.job_id, raw, extra=whole)
        case JobState.CANCELLED:
            reason = _reason(error or "cancelled")
            log.info(
                "%s cancelled after %s: %s (%d of %d proven)", said, _secs(took), reason, proven,
                job.record.partitions, extra=fields | {"reason": reason},
            )  # fmt: skip
        case _:
            raise AssertionError(f"expected a terminal state, got {state}")


# --- workers ----------------------------------------------------------------------------------------


def _pids(info: WorkerInfo) -> tuple[str, dict[str, Any]]:
    if info.prover_pid is None:
        return "", {}
    said = f" (prover {info.prover_pid}, finalizer {info.finalizer_pid})"
    return said, {"prover_pid": info.prover_pid, "finalizer_pid": info.finalizer_pid}


def worker_started(info: WorkerInfo, took: float, down: float | None, failed_starts: int) -> None:
    """A worker answers: the slot's first (``down`` None), or the replacement of one that died ``down``
    seconds ago; ``failed_starts``: the starts that failed right before this one."""
    pids, fields = _pids(info)
    fields |= {"worker_id": info.worker_id, "device": info.device, "start_secs": round(took, 3),
               "failed_starts": failed_starts}  # fmt: skip
    tries = f" after {_plural(failed_starts, 'failed start')}" if failed_starts else ""
    if down is None:
        log.info("worker %s started in %s%s%s", info.worker_id, _secs(took), pids, tries, extra=fields)
        return
    log.info(
        "worker %s restarted: its replacement answers, %s after the death%s%s", info.worker_id, _secs(down),
        pids, tries, extra=fields | {"restarted": True, "down_secs": round(down, 3)},
    )  # fmt: skip


def worker_died(info: WorkerInfo, reason: str, partitions: int, *, stopping: bool = False) -> None:
    """A worker's processes died (which process and why are in ``reason``); what it held is retried. While
    the daemon stops (``stopping``) that is the stop's doing: INFO, and what it held resumes at next start."""
    _, fields = _pids(info)
    fields |= {"worker_id": info.worker_id, "device": info.device, "reason": _reason(reason),
               "partitions": partitions}  # fmt: skip
    if stopping:
        log.info(
            "worker %s ended as the daemon stops: %s; %s it held resume at the next start", info.worker_id,
            _reason(reason), _plural(partitions, "partition"), extra=fields | {"stopping": True},
        )  # fmt: skip
        return
    held = {0: "it held no partition", 1: "the partition it held goes back to the queue"}.get(
        partitions, f"the {partitions} partitions it held go back to the queue"
    )
    log.warning("worker %s died: %s; %s", info.worker_id, _reason(reason), held, extra=fields)


def worker_start_failed(info: WorkerInfo, reason: str, attempt: int, retry_in: float, lost: bool) -> None:
    """A worker could not be started; tried again in ``retry_in`` seconds. Once it is lost (said once by
    :func:`worker_lost`) the attempts that follow, every 30 s at most, are written at DEBUG only."""
    log.log(
        logging.DEBUG if lost else logging.WARNING,
        "worker %s could not start (attempt %d): %s; trying again in %s", info.worker_id, attempt,
        _reason(reason), _secs(retry_in),
        extra={"worker_id": info.worker_id, "device": info.device, "reason": _reason(reason),
               "attempt": attempt},
    )  # fmt: skip


def worker_lost(info: WorkerInfo, reason: str, attempts: int) -> None:
    """A worker cannot be brought back: its starts failed ``attempts`` times in a row."""
    log.error(
        "worker %s lost: it could not be started %d times in a row (last: %s); device %s is tried again, "
        "less and less often", info.worker_id, attempts, _reason(reason), info.device,
        extra={"worker_id": info.worker_id, "device": info.device, "reason": _reason(reason),
               "attempts": attempts},
    )  # fmt: skip


# --- health -----------------------------------------------------------------------------------------


class HealthLog:
    """Writes one line when health turns bad (ERROR, with every reason) and one when it is ok again
    (INFO, with how long it was not). ``read``: health now, or None while it is not to be logged (the
    engine starting or stopping); ``clock``: the engine's (monotonic seconds). Event loop only."""

    def __init__(self, read: Callable[[], Health | None], clock: Callable[[], float]) -> None:
        self._read = read
        self._clock = clock
        self._bad_since: float | None = None  # when health last turned bad; None while it is ok
        self._soon = False  # a look is due at the loop's next turn

    def saw(self, event: ev.Event) -> None:
        """After each event: a worker's coming or going is looked at at once (a death and its replacement
        may come in one turn of the loop); while health is not ok, any event may have mended it, and one
        look per turn of the loop is enough. While it is ok nothing else can make it bad but time (a stall)
        or a journal that cannot be written, which the timer sees."""
        if isinstance(event, _WORKER_EVENTS):
            self.look()
        elif self._bad_since is not None and not self._soon:
            self._soon = True
            asyncio.get_running_loop().call_soon(self._look_soon)

    def _look_soon(self) -> None:
        self._soon = False
        self.look()

    def look(self) -> None:
        """Write a line if health now is not what it last was."""
        health = self._read()
        if health is None:
            return
        if not health.ok and self._bad_since is None:
            self._bad_since = self._clock()
            fields = {"ok": False, "reasons": list(health.reasons), "devices_down": list(health.devices_down)}
            health_log.error("health not ok: %s", "; ".join(map(one_line, health.reasons)), extra=fields)
        elif health.ok and self._bad_since is not None:
            away = max(0.0, self._clock() - self._bad_since)
            self._bad_since = None
            fields = {"ok": True, "down_secs": round(away, 3)}
            health_log.info("health ok again after %s not ok", _secs(away), extra=fields)

    async def run(self) -> None:
        """Look every ``HEALTH_CHECK_SECS``, until cancelled."""
        while True:
            await asyncio.sleep(HEALTH_CHECK_SECS)
            self.look()
