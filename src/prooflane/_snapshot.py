"""The frozen views the status tracker hands out: a :class:`StatusSnapshot` and everything inside it.

Nothing here refers to live state: every field is a number, a string, a tuple or a read-only mapping, so a
snapshot can be kept, compared and serialised while the tracker moves on. ``to_json()`` gives the exact
``GET /status`` shape (names are a contract with other tools: fields may be added, never renamed).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .states import JobState, PartitionState, WorkerState

__all__ = [
    "REASON_LIMIT",
    "AllocationStatus",
    "CountersStatus",
    "DeviceStatus",
    "FinalizingLease",
    "HistoryStatus",
    "JobState",
    "MemoryStatus",
    "PartitionState",
    "PartitionStatus",
    "PipelineStatus",
    "RecentJob",
    "RecentPartition",
    "StatusSnapshot",
    "SynthesisStatus",
    "WorkerState",
    "WorkerStatus",
    "readable_reason",
]


REASON_LIMIT = 500
"""The most characters of a failure reason a snapshot carries (the journal keeps the whole text)."""

ELLIPSIS = " …"
"""Marks a reason that lost lines (stack frames) or characters to :func:`readable_reason`."""

# ANSI escape sequences: CSI ("ESC [ ... final", colours among them), OSC ("ESC ] ... BEL/ST") and the
# two-character ones; then C0/C1 control characters other than the newline (tabs become spaces first).
_ANSI = re.compile(
    r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])|\x9b[0-?]*[ -/]*[@-~]"
)
_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")
_STACK_FRAME = re.compile(r"\s+at\s")  # "    at fn (file:line:col)": a Node (or similar) stack frame


def readable_reason(text: str, limit: int = REASON_LIMIT) -> str:
    """A failure reason a person can read: no terminal escapes or control characters, no stack frames.

    Keeps the first meaningful lines (blank lines and indented ``at ...`` frames dropped, runs of spaces
    collapsed) up to ``limit`` characters; when anything was dropped or cut, the text ends with
    :data:`ELLIPSIS`.
    """
    if len(text) <= limit and text.isprintable() and text == text.strip():
        return text  # the common case: a short plain line
    text = _ANSI.sub("", text).replace("\r\n", "\n").replace("\r", "\n").replace("\t", " ")
    text = _CONTROL.sub("", text)
    lines = [line for line in text.split("\n") if line.strip()]
    kept = [" ".join(line.split()) for line in lines if not _STACK_FRAME.match(line)]
    if not kept:  # nothing but frames: the first one still says where
        kept = [" ".join(lines[0].split())] if lines else []
    out = "\n".join(kept)
    cut = len(kept) < len(lines)
    if len(out) > limit:
        out, cut = out[: limit - len(ELLIPSIS)].rstrip(), True
    return out + ELLIPSIS if cut else out


@dataclass(frozen=True, slots=True)
class PartitionStatus:
    """One partition of a live job. Times are in milliseconds, None until the phase ends."""

    index: int
    state: PartitionState
    attempt: int
    worker_id: str | None
    synth_ms: float | None
    prove_ms: float | None
    finalize_ms: float | None
    reason: str | None

    def to_json(self) -> dict[str, Any]:
        """The partition as ``/status`` gives it."""
        return {
            "index": self.index,
            "state": self.state.value,
            "attempt": self.attempt,
            "worker_id": self.worker_id,
            "synth_ms": self.synth_ms,
            "prove_ms": self.prove_ms,
            "finalize_ms": self.finalize_ms,
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class PipelineStatus:
    """One job in the live view (running, or finished within the retention time)."""

    job_id: str
    proof_kind: str
    priority: str
    state: JobState
    started_secs_ago: float
    elapsed_secs: float
    total_partitions: int
    partitions_done: int
    partitions: tuple[PartitionStatus, ...]
    reason: str | None
    failed_partition: int | None
    circuit: str | None = None  # the registered circuit of a circom job; None for built-in kinds
    # The partitions as JSON text, cached by the tracker while they do not change (not part of the value).
    partitions_json: str | None = field(default=None, compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        """The job as one entry of ``/status`` ``pipelines``."""
        doc = self._head()
        doc["partitions"] = [p.to_json() for p in self.partitions]
        return doc

    def to_json_text(self) -> str:
        """:meth:`to_json` as compact JSON text, reusing the cached partitions text when there is one."""
        parts = self.partitions_json
        if parts is None:
            parts = partitions_json(self.partitions)
        return f'{_dumps(self._head())[:-1]},"partitions":{parts}}}'

    def _head(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "proof_kind": self.proof_kind,
            "priority": self.priority,
            "state": self.state.value,
            "started_secs_ago": self.started_secs_ago,
            "elapsed_secs": self.elapsed_secs,
            "total_partitions": self.total_partitions,
            "partitions_done": self.partitions_done,
            "reason": self.reason,
            "failed_partition": self.failed_partition,
            "circuit": self.circuit,
        }


@dataclass(frozen=True, slots=True)
class FinalizingLease:
    """A partition whose finalizer still runs for a worker."""

    job_id: str
    partition: int
    token: int

    def to_json(self) -> dict[str, Any]:
        """``{"job_id", "partition", "token"}``."""
        return {"job_id": self.job_id, "partition": self.partition, "token": self.token}


@dataclass(frozen=True, slots=True)
class WorkerStatus:
    """One live worker. ``busy_secs``: time in the current lease; totals count device-section time only."""

    worker_id: str
    device: str
    state: WorkerState
    current_job: str | None
    current_partition: int | None
    current_token: int | None
    busy_secs: float
    finalizing: tuple[FinalizingLease, ...]
    busy_seconds_total: float

    def to_json(self) -> dict[str, Any]:
        """The worker as one entry of ``/status`` ``workers``."""
        return {
            "worker_id": self.worker_id,
            "device": self.device,
            "state": self.state.value,
            "current_job": self.current_job,
            "current_partition": self.current_partition,
            "current_token": self.current_token,
            "busy_secs": self.busy_secs,
            "finalizing": [f.to_json() for f in self.finalizing],
            "busy_seconds_total": self.busy_seconds_total,
        }


@dataclass(frozen=True, slots=True)
class DeviceStatus:
    """A device: busy while any of its workers holds a current lease."""

    device: str
    kind: str
    busy_fraction_1m: float
    workers: int

    def to_json(self) -> dict[str, Any]:
        """The device as one entry of ``/status`` ``devices``."""
        return {
            "device": self.device,
            "kind": self.kind,
            "busy_fraction_1m": self.busy_fraction_1m,
            "workers": self.workers,
        }


@dataclass(frozen=True, slots=True)
class AllocationStatus:
    """A cached allocation (a proving key held by a worker)."""

    name: str
    bytes: int
    last_used_secs_ago: float
    evictable: bool

    def to_json(self) -> dict[str, Any]:
        """The allocation as one entry of ``/status`` ``allocations``."""
        return {
            "name": self.name,
            "bytes": self.bytes,
            "last_used_secs_ago": self.last_used_secs_ago,
            "evictable": self.evictable,
        }


@dataclass(frozen=True, slots=True)
class MemoryStatus:
    """The memory budget. ``available_bytes`` = total - reserved - cached, never below zero."""

    total_bytes: int
    reserved_bytes: int
    available_bytes: int
    process_rss_bytes: int
    cached_bytes: int
    reservations: int

    def to_json(self) -> dict[str, Any]:
        """``/status`` ``memory``."""
        return {
            "total_bytes": self.total_bytes,
            "reserved_bytes": self.reserved_bytes,
            "available_bytes": self.available_bytes,
            "process_rss_bytes": self.process_rss_bytes,
            "cached_bytes": self.cached_bytes,
            "reservations": self.reservations,
        }


@dataclass(frozen=True, slots=True)
class SynthesisStatus:
    """The synthesis pool: its size and how many partitions it synthesizes now."""

    max_concurrent: int
    active: int

    def to_json(self) -> dict[str, Any]:
        """``/status`` ``synthesis``."""
        return {"max_concurrent": self.max_concurrent, "active": self.active}


@dataclass(frozen=True, slots=True)
class CountersStatus:
    """Totals since boot. Each terminal job is counted exactly once, in one outcome.

    ``queue_depth``: partitions pending (waiting for synthesis); ``device_queue_depth``: partitions
    synthesized and waiting for a worker.
    """

    total_completed: int
    total_failed: int
    total_cancelled: int
    completed_by_kind: Mapping[str, int]
    failed_by_kind: Mapping[str, int]
    cancelled_by_kind: Mapping[str, int]
    queue_depth: int
    queue_depth_by_priority: Mapping[str, int]
    device_queue_depth: int
    partitions_completed: int
    retries: int
    illegal_events: int

    def to_json(self) -> dict[str, Any]:
        """``/status`` ``counters``."""
        return {
            "total_completed": self.total_completed,
            "total_failed": self.total_failed,
            "total_cancelled": self.total_cancelled,
            "completed_by_kind": dict(self.completed_by_kind),
            "failed_by_kind": dict(self.failed_by_kind),
            "cancelled_by_kind": dict(self.cancelled_by_kind),
            "queue_depth": self.queue_depth,
            "queue_depth_by_priority": dict(self.queue_depth_by_priority),
            "device_queue_depth": self.device_queue_depth,
            "partitions_completed": self.partitions_completed,
            "retries": self.retries,
            "illegal_events": self.illegal_events,
        }


@dataclass(frozen=True, slots=True)
class HistoryStatus:
    """Per-minute history, oldest first, the last entry being the current (partial) minute."""

    minute_secs: float
    proofs_per_minute: tuple[int, ...]
    partitions_per_minute: tuple[int, ...]
    busy_fraction_per_minute: tuple[float, ...]

    def to_json(self) -> dict[str, Any]:
        """``/status`` ``history``."""
        return {
            "minute_secs": self.minute_secs,
            "proofs_per_minute": list(self.proofs_per_minute),
            "partitions_per_minute": list(self.partitions_per_minute),
            "busy_fraction_per_minute": list(self.busy_fraction_per_minute),
        }


@dataclass(frozen=True, slots=True)
class RecentJob:
    """A finished job, kept in a short history after it leaves the live view."""

    job_id: str
    proof_kind: str
    outcome: JobState
    duration_secs: float
    ended_secs_ago: float
    reason: str | None
    failed_partition: int | None
    circuit: str | None = None  # the registered circuit of a circom job; None for built-in kinds

    def to_json(self) -> dict[str, Any]:
        """One entry of ``/status`` ``recent_jobs``."""
        return {
            "job_id": self.job_id,
            "proof_kind": self.proof_kind,
            "outcome": self.outcome.value,
            "duration_secs": self.duration_secs,
            "ended_secs_ago": self.ended_secs_ago,
            "reason": self.reason,
            "failed_partition": self.failed_partition,
            "circuit": self.circuit,
        }


@dataclass(frozen=True, slots=True)
class RecentPartition:
    """Phase times of a partition that finished (done), newest last."""

    job_id: str
    proof_kind: str
    index: int
    synth_ms: float | None
    prove_ms: float | None
    finalize_ms: float | None

    def to_json(self) -> dict[str, Any]:
        """One entry of ``/status`` ``recent_partitions``."""
        return {
            "job_id": self.job_id,
            "proof_kind": self.proof_kind,
            "index": self.index,
            "synth_ms": self.synth_ms,
            "prove_ms": self.prove_ms,
            "finalize_ms": self.finalize_ms,
        }


@dataclass(frozen=True, slots=True)
class StatusSnapshot:
    """One consistent view of the tracker, taken at event ``seq`` of boot ``boot_id``.

    ``seq`` is the id of the last event folded in (applied or dropped): it never goes back within a boot,
    and an event stream resumed from ``seq`` continues this snapshot without a gap.
    """

    version: str
    boot_id: str
    seq: int
    taken_at: float
    uptime_secs: float
    invariants_ok: bool
    invariant_violations: tuple[str, ...]
    stale_events: int
    illegal_events: int
    memory: MemoryStatus
    synthesis: SynthesisStatus
    pipelines: tuple[PipelineStatus, ...]
    workers: tuple[WorkerStatus, ...]
    devices: tuple[DeviceStatus, ...]
    allocations: tuple[AllocationStatus, ...]
    counters: CountersStatus
    history: HistoryStatus
    recent_jobs: tuple[RecentJob, ...]
    recent_partitions: tuple[RecentPartition, ...]

    def to_json_text(self) -> str:
        """The ``GET /status`` document as compact JSON text: serve this body as it is.

        A generic Python encoder (FastAPI's ``jsonable_encoder``, used for routes without a return type)
        walks the dict in Python: tens of milliseconds at 100 jobs of 16 partitions.
        """
        head = _dumps(self._head())
        pipelines = ",".join(p.to_json_text() for p in self.pipelines)
        return f'{head[:-1]},"pipelines":[{pipelines}]}}'

    def to_json(self) -> dict[str, Any]:
        """The ``GET /status`` document (a fresh dict of JSON types)."""
        doc = self._head()
        doc["pipelines"] = [p.to_json() for p in self.pipelines]
        return doc

    def _head(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "boot_id": self.boot_id,
            "seq": self.seq,
            "taken_at": self.taken_at,
            "uptime_secs": self.uptime_secs,
            "invariants_ok": self.invariants_ok,
            "invariant_violations": list(self.invariant_violations),
            "stale_events": self.stale_events,
            "illegal_events": self.illegal_events,
            "memory": self.memory.to_json(),
            "synthesis": self.synthesis.to_json(),
            "workers": [w.to_json() for w in self.workers],
            "devices": [d.to_json() for d in self.devices],
            "allocations": [a.to_json() for a in self.allocations],
            "counters": self.counters.to_json(),
            "history": self.history.to_json(),
            "recent_jobs": [j.to_json() for j in self.recent_jobs],
            "recent_partitions": [p.to_json() for p in self.recent_partitions],
        }


def partitions_json(partitions: tuple[PartitionStatus, ...]) -> str:
    """The partitions of one job as compact JSON text (a list)."""
    return _dumps([p.to_json() for p in partitions])


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))
