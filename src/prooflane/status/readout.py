"""The status tracker's read side: frozen snapshots and totals built from its records at one moment.

Every function here reads :class:`~.records.Records` and writes nothing but what reads reuse: a
job's entry (its frozen views and JSON text, rebuilt only when the job's ``version`` moved, which every write
to the job or its partitions does) and the text of the recent partitions (rebuilt when one was added). They
run on the event loop, between two events, like every tracker read.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ..states import JobState, PartitionState, Priority, WorkerState
from .encode import json_frame
from .records import Job, JobViews, MemoryLedger, Records, Worker
from .rss import this_machine
from .snapshot import (
    PARTITIONS_LISTED,
    CountersStatus,
    DeviceMemoryStatus,
    DeviceStatus,
    FinalizingLease,
    Health,
    HistoryStatus,
    JobGroup,
    JournalCheckStatus,
    LiveJobsStatus,
    MemoryStatus,
    PartitionCounts,
    PartitionStatus,
    PipelineEntry,
    Pipelines,
    PipelineStatus,
    RecentJob,
    StatusSnapshot,
    SynthesisStatus,
    TablesStatus,
    WorkerStatus,
    partitions_json,
    pipeline_rank,
)
from .timing import MINUTE, THROUGHPUT_WINDOWS, DeviceBusy, HistogramView

__all__ = ["SnapshotHead", "TrackerTotals", "health", "snapshot", "totals"]

P = PartitionState
_OUTCOMES = (JobState.DONE, JobState.FAILED, JobState.CANCELLED)
_HOLDING = frozenset({P.SYNTHESIZING, P.PROVING, P.FINALIZING})  # a partition that holds work now


@dataclass(frozen=True, slots=True)
class SnapshotHead:
    """What a snapshot says about the tracker itself rather than its records."""

    version: str
    boot_id: str
    taken_at: float
    uptime_secs: float
    process_rss_bytes: int
    invariant_violations: tuple[str, ...]
    health_reasons: tuple[str, ...] = ()  # the caller's own reasons against health
    tree_rss_bytes: int = 0  # the daemon's and its descendants' RSS (see .rss)


@dataclass(frozen=True, slots=True)
class TrackerTotals:
    """Everything ``/metrics`` renders, copied out at one moment. Keys are label tuples."""

    partitions: Mapping[tuple[str, str], int]
    jobs: Mapping[tuple[str, str], int]
    phases: Mapping[str, HistogramView]
    worker_busy_seconds: Mapping[str, float]
    worker_restarts: Mapping[tuple[str, str], int]  # (worker, device) -> restarts, every listed worker
    workers_by_state: Mapping[str, int]
    device_busy_fraction: Mapping[str, float]
    memory_reserved_bytes: int
    memory_budget_bytes: int
    memory_cached_bytes: int
    queue_depth: int
    synthesis_active: int
    stale_events: int
    illegal_events: int
    events: int
    invariant_violations: int
    retries: int
    health: Health
    journal_checks: int = 0  # the engine's comparisons of the live view with the journal
    journal_disagreed: int = 0  # times one found a disagreement anew
    # device -> its memory (cuda devices with a budget): total, resident keys' and in-use bytes
    device_memory: Mapping[str, DeviceMemoryStatus] = field(default_factory=lambda: MappingProxyType({}))
    arithmetic: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # curve -> as /status
    tables: tuple[TablesStatus, ...] = ()  # each key's fixed-base tables, by key name, as /status


def snapshot(r: Records, now: float, head: SnapshotHead) -> StatusSnapshot:
    """A frozen, consistent view of the records, as ``GET /status`` serves it."""
    listed = {w.device.name for w in r.workers.values()}
    devices = [d for d in r.devices.values() if d.name in listed]
    entries = tuple(_entry(j, now) for j in r.jobs.values())
    recent = tuple(r.recent_partitions)
    return StatusSnapshot(
        version=head.version,
        boot_id=head.boot_id,
        seq=r.seq,
        taken_at=head.taken_at,
        uptime_secs=head.uptime_secs,
        machine=r.machine or this_machine(),
        arithmetic=r.arithmetic,
        products=r.products,
        invariants_ok=not head.invariant_violations,
        invariant_violations=head.invariant_violations,
        journal_check=_journal_check(r, now),
        health=health(r, now, head.health_reasons),
        stale_events=r.stale,
        illegal_events=r.illegal,
        memory=_memory(r, head),
        synthesis=SynthesisStatus(r.synth_max, r.states[P.SYNTHESIZING]),
        workers=tuple(_worker(r, w, now) for w in r.workers.values()),
        devices=tuple(_device(r, d, now) for d in devices),
        allocations=r.memory.allocations(now),
        tables=_tables(r),
        counters=_counters(r),
        history=_history(r, now, devices, now - head.uptime_secs),
        recent_jobs=tuple(_recent_job(j, now) for j in reversed(r.recent_jobs)),
        recent_failures=tuple(_recent_job(j, now) for j in reversed(r.recent_failures)),
        recent_partitions=recent,
        recent_partitions_json=_recent_partitions_json(r),
        live_jobs=_live_jobs(entries),
        pipelines=Pipelines(entries, now),
    )


def _journal_check(r: Records, now: float) -> JournalCheckStatus:
    ago = None if r.journal_checked_at is None else now - r.journal_checked_at
    return JournalCheckStatus(r.journal_disagreed, ago, r.journal_checks)


def health(r: Records, now: float, extra_reasons: Iterable[str] = ()) -> Health:
    """Ok when some worker is listed, every device listed has a live one, and no device section or
    finalization has run past ``stall_secs`` (a worker that does not answer: stopped, deadlocked); plus
    ``extra_reasons``. Warned (never against ``ok``): each curve proved on the libraries."""
    reasons = [] if r.workers else ["no worker is registered"]
    reasons += [f"worker {w.worker_id}: {said}" for w in r.workers.values() if (said := stuck(r, w, now))]
    down = []
    for device in r.devices.values():
        workers = [w for w in r.workers.values() if w.device is device]
        if workers and not any(w.live for w in workers):
            down.append(device.name)
            said = "; ".join(f"{w.worker_id} {w.state.value}: {w.last_error}" for w in workers)
            reasons.append(f"device {device.name} has no live worker ({said})")
    if found := r.journal_disagreements:
        more = f" (and {len(found) - 1} more: see invariant_violations)" if len(found) > 1 else ""
        reasons.append(f"the live view disagrees with the journal: {found[0]}{more}")
    warnings = arithmetic_warnings(r.arithmetic)
    return Health(not reasons, tuple(reasons), tuple(down), warnings).with_reasons(*extra_reasons)


def arithmetic_warnings(arithmetic: Mapping[str, str]) -> tuple[str, ...]:
    """One warning per reason some curves prove on the libraries (the slower path), naming those curves:
    ``"bn128 and bls12381 prove on the libraries, the slower arithmetic (PROOFLANE_NATIVE=0)"``."""
    curves_by_why: dict[str, list[str]] = {}
    for curve, said in arithmetic.items():
        if said.startswith("libraries"):
            _, _, why = said.partition(":")
            curves_by_why.setdefault(why.strip() or said, []).append(curve)
    return tuple(
        f"{' and '.join(curves)} {'proves' if len(curves) == 1 else 'prove'} on the libraries, the slower "
        f"arithmetic ({why})"
        for why, curves in curves_by_why.items()
    )


def _tables(r: Records) -> tuple[TablesStatus, ...]:
    return tuple(r.tables[key] for key in sorted(r.tables))


def totals(
    r: Records, now: float, invariant_violations: int, health_reasons: Iterable[str] = ()
) -> TrackerTotals:
    """What ``/metrics`` renders: counters since boot and gauges now."""
    busy = dict(r.busy_total)
    for w in r.workers.values():
        if w.current is not None:
            busy[w.worker_id] += max(0.0, now - r.leases[w.current].granted_at)
    return TrackerTotals(
        partitions=MappingProxyType(dict(r.partitions_total)),
        jobs=MappingProxyType(dict(r.jobs_total)),
        phases=MappingProxyType({name: h.view() for name, h in r.phases.items()}),
        worker_busy_seconds=MappingProxyType(busy),
        worker_restarts=MappingProxyType(
            {(w.worker_id, w.device.name): w.restarts for w in r.workers.values()}
        ),
        workers_by_state=MappingProxyType(
            {s.value: sum(w.state is s for w in r.workers.values()) for s in WorkerState}
        ),
        device_busy_fraction=MappingProxyType({d.name: d.fraction(now) for d in r.devices.values()}),
        memory_reserved_bytes=r.memory.reserved_bytes,
        memory_budget_bytes=r.memory.total_bytes,
        memory_cached_bytes=r.memory.cached_bytes,
        queue_depth=r.states[P.PENDING],
        synthesis_active=r.states[P.SYNTHESIZING],
        stale_events=r.stale,
        illegal_events=r.illegal,
        events=r.seq,
        invariant_violations=invariant_violations,
        retries=r.retries,
        health=health(r, now, health_reasons),
        journal_checks=r.journal_checks,
        journal_disagreed=r.journal_disagreed,
        device_memory=MappingProxyType({d: _device_memory(m) for d, m in r.device_memory.items()}),
        arithmetic=r.arithmetic,
        tables=_tables(r),
    )


def _entry(job: Job, now: float) -> PipelineEntry:
    views = job.views
    if views is None or views.version != job.version:
        # The job or a partition changed since its entry was built (any write moves the version).
        version = job.version
        counts = Counter(p.state for p in job.partitions)
        status = _pipeline_status(job, now, _listed(job), counts)
        before, between, after = json_frame(status)
        holds = any(counts[state] for state in _HOLDING)
        rank = pipeline_rank(status.state, job.priority, job.ended_at, holds)
        pending = counts[P.PENDING]
        group = (status.proof_kind, status.priority, status.state)
        entry = PipelineEntry(
            status, (before, between, after), job.submitted_at, job.ended_at, rank, pending, group
        )
        views = job.views = JobViews(version, entry)
    return views.entry


def _recent_partitions_json(r: Records) -> str:
    """Their JSON text: each partition's, made once as it was added, joined (256 of them at every read
    made again took a third of a /status at full load)."""
    return f"[{','.join(r.recent_partitions_text)}]"


def _listed(job: Job) -> tuple[PartitionStatus, ...]:
    """The job's partitions ``/status`` lists: all of them, or for a job of more than ``PARTITIONS_LISTED``,
    those in flight, failed or cancelled first, then done, then pending, in index order."""
    partitions = job.partitions
    if len(partitions) > PARTITIONS_LISTED:
        first = sorted(partitions, key=lambda p: (_LISTED_FIRST.get(p.state, 0), p.index))
        partitions = sorted(first[:PARTITIONS_LISTED], key=lambda p: p.index)
    return tuple(p.status() for p in partitions)


_LISTED_FIRST = {P.DONE: 1, P.PENDING: 2}  # the rest (in flight, failed, cancelled) first: 0


def _pipeline_status(
    job: Job, now: float, partitions: tuple[PartitionStatus, ...], counts: Counter[PartitionState]
) -> PipelineStatus:
    state = job.outcome or (JobState.RUNNING if job.started else JobState.QUEUED)
    end = job.ended_at if job.ended_at is not None else now
    return PipelineStatus(
        job_id=job.job_id,
        proof_kind=job.kind,
        priority=job.priority,
        state=state,
        started_secs_ago=now - job.submitted_at,
        elapsed_secs=end - job.submitted_at,
        total_partitions=len(job.partitions),
        partitions_done=job.done,
        partition_counts=PartitionCounts(**{state.value: n for state, n in counts.items()}),
        partitions=partitions,
        partitions_json=partitions_json(partitions),
        reason=job.reason,
        failed_partition=job.failed_partition,
        circuit=job.circuit,
    )


def _live_jobs(entries: tuple[PipelineEntry, ...]) -> LiveJobsStatus:
    groups: dict[tuple[str, str, JobState], list[int]] = {}
    for e in entries:  # every live job at every read: keep it lean
        counts = groups.get(e.group)
        if counts is None:
            groups[e.group] = [1, e.status.total_partitions, e.pending]
        else:
            counts[0] += 1
            counts[1] += e.status.total_partitions
            counts[2] += e.pending
    states = Counter[JobState]()
    for key, counts in groups.items():
        states[key[2]] += counts[0]
    return LiveJobsStatus(
        total=len(entries),
        shown=len(entries),
        queued=states[JobState.QUEUED],
        running=states[JobState.RUNNING],
        done=states[JobState.DONE],
        failed=states[JobState.FAILED],
        cancelled=states[JobState.CANCELLED],
        groups=tuple(
            JobGroup(key[0], key[1], key[2], *counts)
            for key, counts in sorted(groups.items(), key=_group_order)
        ),
    )


def _group_order(item: tuple[tuple[str, str, JobState], list[int]]) -> tuple[str, int, int]:
    kind, priority, state = item[0]
    return (kind, _PRIORITY_RANK.get(priority, len(_PRIORITY_RANK)), _JOB_STATE_RANK[state])


_PRIORITY_RANK = {p.value: p.rank for p in Priority}
_JOB_STATE_RANK = {s: n for n, s in enumerate(JobState)}


def stuck(r: Records, worker: Worker, now: float) -> str | None:
    """What of ``worker``'s work has run past ``stall_secs`` (the longest first), in words; None when nothing.

    A live worker whose device section or finalization goes on far longer than any should (its process
    stopped, deadlocked, or spinning) says nothing by itself: no event comes. This is read at every
    snapshot and health check, from the lease times the tracker holds."""
    limit = r.stall_secs
    running = []
    if worker.current is not None:
        lease = r.leases[worker.current]
        running.append((now - lease.granted_at, f"the device section of {lease.partition.name}"))
    for token, since in worker.finalizing.items():
        running.append((now - since, f"the finalization of {r.leases[token].partition.name}"))
    late = sorted((secs, what) for secs, what in running if secs > limit)
    if not late or not worker.live:
        return None
    secs, what = late[-1]
    return f"{what} has run {secs:.0f} s, longer than stall_secs ({limit:g} s): is the worker hung?"


def _worker(r: Records, worker: Worker, now: float) -> WorkerStatus:
    lease = r.leases[worker.current] if worker.current is not None else None
    busy = max(0.0, now - lease.granted_at) if lease is not None else 0.0
    own = worker.own_synthesis() if lease is None and worker.live else None
    if own is not None:  # synthesizing its next partition itself: that partition, for as long
        partition, since = own
        return _worker_status(r, worker, now, partition.job.job_id, partition.index, None, now - since)
    job, index, token = (
        (lease.partition.job.job_id, lease.partition.index, lease.token) if lease else (None,) * 3
    )
    return _worker_status(r, worker, now, job, index, token, busy)


def _worker_status(
    r: Records, worker: Worker, now: float, job: str | None, index: int | None, token: int | None, busy: float
) -> WorkerStatus:
    finalizing = []
    for lease_token in worker.finalizing:
        p = r.leases[lease_token].partition
        finalizing.append(FinalizingLease(p.job.job_id, p.index, lease_token))
    proving = busy if token is not None else 0.0  # the device-section total counts leases only
    return WorkerStatus(
        worker_id=worker.worker_id,
        device=worker.device.name,
        state=worker.state,
        current_job=job,
        current_partition=index,
        current_token=token,
        busy_secs=busy,
        finalizing=tuple(finalizing),
        busy_seconds_total=r.busy_total.get(worker.worker_id, 0.0) + proving,
        last_error=worker.last_error,
        restarts=worker.restarts,
        node=worker.node,
        last_restart_secs_ago=None if worker.last_restart_at is None else now - worker.last_restart_at,
        stuck=stuck(r, worker, now),
    )


def _device(r: Records, device: DeviceBusy, now: float) -> DeviceStatus:
    workers = [w for w in r.workers.values() if w.device is device]
    live = sum(w.live for w in workers)
    node = next((w.node for w in reversed(workers) if w.node is not None), None)
    ledger = r.device_memory.get(device.name)
    memory = None if ledger is None else _device_memory(ledger)
    return DeviceStatus(
        device.name, device.kind, device.fraction(now), live, len(workers) - live, node, memory
    )


def _device_memory(ledger: MemoryLedger) -> DeviceMemoryStatus:
    return DeviceMemoryStatus(
        ledger.total_bytes, ledger.cached_bytes, ledger.allocated, ledger.reserved_bytes
    )


def _memory(r: Records, head: SnapshotHead) -> MemoryStatus:
    memory = r.memory
    cached = memory.cached_bytes
    used = memory.reserved_bytes + cached  # everything the budget holds
    return MemoryStatus(
        total_bytes=memory.total_bytes,
        reserved_bytes=memory.reserved_bytes,
        available_bytes=max(0, memory.total_bytes - used),
        process_rss_bytes=head.process_rss_bytes,
        cached_bytes=cached,
        reservations=memory.reservations,
        used_bytes=used,
        tree_rss_bytes=head.tree_rss_bytes,
    )


def _counters(r: Records) -> CountersStatus:
    by: dict[str, dict[str, int]] = {o.value: {} for o in _OUTCOMES}
    for (kind, outcome), n in sorted(r.jobs_total.items()):
        by[outcome][kind] = n
    return CountersStatus(
        total_completed=sum(by[JobState.DONE].values()),
        total_failed=sum(by[JobState.FAILED].values()),
        total_cancelled=sum(by[JobState.CANCELLED].values()),
        completed_by_kind=MappingProxyType(by[JobState.DONE]),
        failed_by_kind=MappingProxyType(by[JobState.FAILED]),
        cancelled_by_kind=MappingProxyType(by[JobState.CANCELLED]),
        queue_depth=r.states[P.PENDING],
        queue_depth_by_priority=MappingProxyType({k: n for k, n in r.pending_by_priority.items() if n}),
        device_queue_depth=r.states[P.SYNTHESIZED],
        partitions_completed=sum(n for (_, o), n in r.partitions_total.items() if o == P.DONE),
        retries=r.retries,
        illegal_events=r.illegal,
    )


def _history(r: Records, now: float, devices: list[DeviceBusy], since: float) -> HistoryStatus:
    """The per-minute series, and the throughput over the last minute and ten (``since``: the boot)."""
    open_intervals = [(d.busy_since, now) for d in devices if d.busy_since is not None]
    proofs, partitions, busy = r.history.series(now, len(devices), open_intervals)
    short, long = THROUGHPUT_WINDOWS
    return HistoryStatus(
        MINUTE,
        proofs,
        partitions,
        busy,
        proofs_per_hour_1m=r.proofs_done.per_hour(now, short, since),
        proofs_per_hour_10m=r.proofs_done.per_hour(now, long, since),
        partitions_per_hour_1m=r.partitions_done.per_hour(now, short, since),
        partitions_per_hour_10m=r.partitions_done.per_hour(now, long, since),
    )


def _recent_job(job: Job, now: float) -> RecentJob:
    assert job.outcome is not None and job.ended_at is not None
    return RecentJob(
        job_id=job.job_id,
        proof_kind=job.kind,
        outcome=job.outcome,
        duration_secs=job.ended_at - job.submitted_at,
        ended_secs_ago=now - job.ended_at,
        reason=job.reason,
        failed_partition=job.failed_partition,
        circuit=job.circuit,
    )
