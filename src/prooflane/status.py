"""The status tracker: the engine's events in, frozen snapshots out. It cannot show a busy worker as idle.

One writer, no lock. The tracker's state changes only in :meth:`StatusTracker.apply`, which runs on the event
loop; threads and processes post events with ``loop.call_soon_threadsafe(tracker.apply, event)`` and never
touch the state. Reads (:meth:`~StatusTracker.snapshot`, :meth:`~StatusTracker.totals`,
:meth:`~StatusTracker.invariants`) run on the same loop, so every read sees the state between two events.

Leases. Each :class:`~prooflane.events.LeaseGranted` makes its token the worker's *current lease*.
:class:`~prooflane.events.DeviceSectionFinished` moves it from current to the worker's *finalizing leases*;
:class:`~prooflane.events.FinalizeFinished` removes it. An event about leased work is applied only while its
token is live in the place that event expects (current for a device section end, finalizing for a finalize
end); otherwise it is *stale*: dropped and counted, never applied, so no "end" can clear a later "start".
Events about a job the live view no longer holds, a partition already terminal, or an older attempt are stale
too. Worker states are computed from these facts (never stored): proving when it has a current lease,
finalizing when it has only finalizing leases, idle otherwise; a worker proving one partition while finalizing
another shows both.

Partition transitions, the table of :mod:`prooflane.states` and the events that make them (anything else is
*illegal*: :class:`~prooflane.errors.IllegalTransition` in strict mode, used by the tests; counted and
ignored in production)::

    pending      -> synthesizing                      SynthesisStarted
    synthesizing -> synthesized                       SynthesisFinished
    synthesized  -> proving                           LeaseGranted
    proving      -> finalizing                        DeviceSectionFinished
    finalizing   -> done                              FinalizeFinished
    any live     -> failed                            SynthesisFailed, PartitionFailed, JobFailed
    any live     -> cancelled                         PartitionSkipped, JobFailed (the others), JobCancelled
    any live but pending -> pending                   PartitionRetried, WorkerDied (retry after a death)

``live`` is pending, synthesizing, synthesized, proving or finalizing; done, failed and cancelled are
terminal and final. A job ends once (done, failed or cancelled), is counted once, stays in the live view for
``retention_secs`` after its end, then leaves it (the journal keeps it). Leaving is an event too: the tracker
folds in a :class:`~prooflane.events.JobExpired` of its own (on the next event, read, or a timer on the
running loop), so the live view never changes without ``seq`` moving and the event feed tells subscribers.
"""

from __future__ import annotations

import asyncio
import enum
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, assert_never

import psutil

from . import events as ev
from ._feed import EventFeed, FeedItem
from ._ledger import IllegalEvent, Job, Lease, MemoryLedger, Partition, StaleEvent, Worker
from ._snapshot import (
    CountersStatus,
    DeviceStatus,
    FinalizingLease,
    HistoryStatus,
    MemoryStatus,
    PipelineStatus,
    RecentJob,
    RecentPartition,
    StatusSnapshot,
    SynthesisStatus,
    WorkerStatus,
    partitions_json,
    readable_reason,
)
from ._stats import MINUTE, DeviceBusy, HistogramView, MinuteHistory, PhaseHistogram
from .errors import IllegalTransition
from .states import (
    LIVE_PARTITION_STATES,
    PARTITION_TRANSITIONS,
    TERMINAL_PARTITION_STATES,
    JobState,
    PartitionState,
    WorkerState,
    check_partition_move,
)

__all__ = [
    "LEGAL_TRANSITIONS",
    "Outcome",
    "PartitionState",
    "StatusSnapshot",
    "StatusTracker",
    "TrackerConfig",
    "TrackerTotals",
    "WorkerState",
]

P = PartitionState
LIVE = LIVE_PARTITION_STATES
TERMINAL = TERMINAL_PARTITION_STATES
LEGAL_TRANSITIONS = PARTITION_TRANSITIONS  # the one table, in prooflane.states

_JOB_OUTCOME = {P.DONE: JobState.DONE, P.FAILED: JobState.FAILED, P.CANCELLED: JobState.CANCELLED}


class Outcome(enum.StrEnum):
    """What :meth:`StatusTracker.apply` did with an event."""

    APPLIED = "applied"
    STALE = "stale"
    ILLEGAL = "illegal"


@dataclass(frozen=True, slots=True)
class TrackerConfig:
    """The tracker's settings. Memory total and synthesis size may also arrive later as events."""

    retention_secs: float = 60.0
    memory_total_bytes: int = 0
    synthesis_max_concurrent: int = 0
    recent_jobs: int = 50
    recent_partitions: int = 256
    history_minutes: int = 60
    feed_capacity: int = 4096
    feed_subscriber_queue: int = 1024
    sample_rss: bool = True


@dataclass(frozen=True, slots=True)
class TrackerTotals:
    """Everything ``/metrics`` renders, copied out at one moment. Keys are label tuples."""

    partitions: Mapping[tuple[str, str], int]
    jobs: Mapping[tuple[str, str], int]
    phases: Mapping[str, HistogramView]
    worker_busy_seconds: Mapping[str, float]
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


class StatusTracker:
    """Folds the engine's events into one consistent state and hands out frozen snapshots.

    ``clock`` (monotonic seconds) must be the clock the engine stamps events' ``at`` with;
    ``wall_clock`` gives ``taken_at``. ``strict=True`` raises :class:`~prooflane.errors.IllegalTransition`
    on an illegal event (and on ``apply`` from a second thread) instead of counting it.
    """

    def __init__(
        self,
        config: TrackerConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        strict: bool = False,
        boot_id: str | None = None,
        version: str | None = None,
    ) -> None:
        self.config = config or TrackerConfig()
        self.strict = strict
        self.boot_id = boot_id or uuid.uuid4().hex
        self.version = version or _package_version()
        self.feed = EventFeed(self.config.feed_capacity, self.config.feed_subscriber_queue)
        self._clock = clock
        self._wall_clock = wall_clock
        self._booted_at = clock()
        self._owner_thread: int | None = None
        self._process = psutil.Process() if self.config.sample_rss else None
        # Every field below is written only by apply() on the event loop (see the module docstring).
        self._seq = 0
        self._stale = 0
        self._illegal = 0
        self._jobs: dict[str, Job] = {}  # live view, in submission order
        self._ended: deque[Job] = deque()  # terminal jobs still in the live view, in order of ending
        self._workers: dict[str, Worker] = {}
        self._devices: dict[str, DeviceBusy] = {}
        self._leases: dict[ev.LeaseToken, Lease] = {}  # live leases: current or finalizing
        self._max_token = 0  # tokens are granted in increasing order: one not above this is old
        # Invariant: _states[s] == number of partitions in the live view in state s.
        self._states: Counter[PartitionState] = Counter()
        self._pending_by_priority: Counter[str] = Counter()
        self._memory = MemoryLedger(self.config.memory_total_bytes)
        self._synth_max = self.config.synthesis_max_concurrent
        self._partitions_total: Counter[tuple[str, str]] = Counter()
        self._jobs_total: Counter[tuple[str, str]] = Counter()  # (kind, outcome): once per job
        self._pruned: Counter[JobState] = Counter()  # terminal jobs that left the live view
        self._busy_total: dict[str, float] = {}  # worker -> closed device-section seconds
        self._retries = 0
        self._phases = {name: PhaseHistogram() for name in ("synth", "prove", "finalize")}
        self._history = MinuteHistory(self.config.history_minutes)
        self._recent_jobs: deque[Job] = deque(maxlen=self.config.recent_jobs)
        self._recent_partitions: deque[RecentPartition] = deque(maxlen=self.config.recent_partitions)
        self._invariants_at: tuple[int, list[str]] = (-1, [])
        # The timer armed on a running loop for the oldest ended job's expiry, and that loop.
        self._expiry_timer: tuple[asyncio.AbstractEventLoop, asyncio.TimerHandle] | None = None

    # --- writing ---------------------------------------------------------------------------------------

    @property
    def seq(self) -> int:
        """The id of the last event received (applied or dropped)."""
        return self._seq

    def apply(self, event: ev.Event) -> Outcome:
        """Fold one event in; call only on the event loop. Returns whether it was applied or dropped.

        Jobs whose retention ran out first leave the live view, each by a
        :class:`~prooflane.events.JobExpired` event with its own ``seq``.
        """
        self._check_thread()
        self._expire(self._clock())
        outcome = self._fold(event)
        self._arm_expiry()
        return outcome

    def expire(self) -> int:
        """Fold in a :class:`~prooflane.events.JobExpired` for every ended job whose retention ran out.

        Call only on the event loop. :meth:`apply` and the reads do it too, and while an event loop runs
        the tracker arms a timer for the next expiry, so subscribers learn of it without a poll.
        Returns ``seq``.
        """
        self._expire(self._clock())
        self._arm_expiry()
        return self._seq

    def _expire(self, now: float) -> None:
        retention = self.config.retention_secs
        while self._ended and now - (self._ended[0].ended_at or 0.0) >= retention:
            self._check_thread()  # leaving the view is a write: on the event loop only
            job = self._ended[0]
            self._fold(ev.JobExpired(at=(job.ended_at or 0.0) + retention, job_id=job.job_id))

    def _arm_expiry(self) -> None:
        if not self._ended:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a synchronous caller): the next event or read expires the job
        if self._expiry_timer is not None and self._expiry_timer[0] is loop:
            return  # armed already (a timer left on another, finished loop never fires: arm a new one)
        due = (self._ended[0].ended_at or 0.0) + self.config.retention_secs
        handle = loop.call_later(max(0.0, due - self._clock()), self._expiry_due)
        self._expiry_timer = (loop, handle)

    def _expiry_due(self) -> None:
        self._expiry_timer = None
        self.expire()

    def _fold(self, event: ev.Event) -> Outcome:
        self._seq += 1
        try:
            context = self._dispatch(event)
            outcome = Outcome.APPLIED
        except StaleEvent as stale:
            self._stale += 1
            outcome, context = Outcome.STALE, {"detail": str(stale)}
        except IllegalEvent as illegal:
            self._illegal += 1
            outcome, context = Outcome.ILLEGAL, {"detail": str(illegal)}
        self.feed.publish(self._seq, event, outcome.value, context)
        if outcome is Outcome.ILLEGAL and self.strict:
            raise IllegalTransition(f"{ev.event_name(event)}: {context['detail']}")
        return outcome

    def subscribe(self, last_event_id: int | None = None) -> AsyncIterator[FeedItem]:
        """The event stream for SSE (see :meth:`prooflane._feed.EventFeed.subscribe`)."""
        return self.feed.subscribe(last_event_id)

    def _dispatch(self, event: ev.Event) -> dict[str, Any]:
        match event:
            case ev.JobSubmitted():
                return self._job_submitted(event)
            case ev.JobDone():
                return self._job_done(event)
            case ev.JobFailed():
                reason = readable_reason(event.reason)
                return self._job_ended(event.job_id, event.at, JobState.FAILED, reason, event.partition)
            case ev.JobCancelled():
                reason = readable_reason(event.reason)
                return self._job_ended(event.job_id, event.at, JobState.CANCELLED, reason, None)
            case ev.JobExpired():
                return self._job_expired(event)
            case ev.SynthesisStarted():
                return self._synthesis(event.job_id, event.partition, event.attempt, P.SYNTHESIZING)
            case ev.SynthesisFinished():
                return self._synthesis_finished(event)
            case ev.SynthesisFailed():
                reason = readable_reason(event.reason)
                return self._synthesis(event.job_id, event.partition, event.attempt, P.FAILED, reason)
            case ev.SynthesisPoolSized():
                self._synth_max = event.max_concurrent
                return {}
            case ev.LeaseGranted():
                return self._lease_granted(event)
            case ev.DeviceSectionFinished():
                return self._device_section_finished(event)
            case ev.FinalizeFinished():
                return self._finalize_finished(event)
            case ev.PartitionFailed():
                return self._partition_ended(event, P.FAILED)
            case ev.PartitionSkipped():
                return self._partition_ended(event, P.CANCELLED)
            case ev.PartitionRetried():
                return self._partition_retried(event)
            case ev.WorkerRegistered():
                return self._worker_registered(event)
            case ev.WorkerDied():
                return self._worker_died(event)
            case (
                ev.BudgetSet()
                | ev.ReservationMade()
                | ev.ReservationShrunk()
                | ev.ReservationReleased()
                | ev.AllocationCached()
                | ev.AllocationUsed()
                | ev.AllocationEvicted()
            ):
                self._memory.apply(event)
                return {}
            case _:
                assert_never(event)

    # --- jobs ------------------------------------------------------------------------------------------

    def _job_submitted(self, event: ev.JobSubmitted) -> dict[str, Any]:
        if event.job_id in self._jobs:
            raise StaleEvent(f"job {event.job_id} is already known")
        done = set(event.done_partitions)
        if event.partitions < 1 or not done <= set(range(event.partitions)):
            raise IllegalEvent(
                f"job {event.job_id}: expected partitions >= 1 and done_partitions within them, "
                f"got {event.partitions} and {sorted(done)}"
            )
        job = Job(event.job_id, event.kind, event.priority, event.at, event.circuit, started=bool(done))
        job.partitions = [Partition(job, i) for i in range(event.partitions)]
        self._jobs[job.job_id] = job
        self._states[P.PENDING] += event.partitions
        self._pending_by_priority[job.priority] += event.partitions
        for index in sorted(done):
            partition = job.partitions[index]
            self._states[P.PENDING] -= 1
            self._pending_by_priority[job.priority] -= 1
            partition.state = P.DONE
            job.done += 1
            self._states[P.DONE] += 1
        return {}

    def _job_done(self, event: ev.JobDone) -> dict[str, Any]:
        job = self._live_job(event.job_id)
        if job.done != len(job.partitions):
            raise IllegalEvent(
                f"job {job.job_id}: expected all {len(job.partitions)} partitions done, got {job.done}"
            )
        self._end_job(job, event.at, JobState.DONE, None, None)
        self._history.count_proof(event.at)
        return {}

    def _job_ended(
        self, job_id: str, at: float, outcome: JobState, reason: str, named: int | None
    ) -> dict[str, Any]:
        job = self._live_job(job_id)
        if named is not None and not 0 <= named < len(job.partitions):
            raise IllegalEvent(f"job {job_id}: expected a partition below {len(job.partitions)}, got {named}")
        for partition in job.partitions:
            if partition.state in LIVE:
                failed = outcome is JobState.FAILED and partition.index == named
                self._end_partition(partition, at, P.FAILED if failed else P.CANCELLED, reason)
        self._end_job(job, at, outcome, reason, named)
        return {}

    def _end_job(self, job: Job, at: float, outcome: JobState, reason: str | None, named: int | None) -> None:
        job.outcome, job.ended_at, job.reason, job.failed_partition = outcome, at, reason, named
        job.counted = True
        self._jobs_total[(job.kind, outcome.value)] += 1
        self._ended.append(job)
        self._recent_jobs.append(job)

    def _live_job(self, job_id: str) -> Job:
        job = self._jobs.get(job_id)
        if job is None:
            raise StaleEvent(f"job {job_id} is not in the live view")
        if job.outcome is not None:
            raise StaleEvent(f"job {job_id} already ended ({job.outcome.value})")
        return job

    def _job_expired(self, event: ev.JobExpired) -> dict[str, Any]:
        job = self._jobs.get(event.job_id)
        if job is None:
            raise StaleEvent(f"job {event.job_id} is not in the live view")
        if job.outcome is None:
            raise IllegalEvent(f"job {job.job_id}: expected an ended job to expire, got one still running")
        if self._ended[0] is job:
            self._ended.popleft()
        else:
            self._ended.remove(job)
        del self._jobs[job.job_id]
        self._pruned[job.outcome] += 1
        for partition in job.partitions:
            self._states[partition.state] -= 1
        return {"job_state": job.outcome.value}

    # --- partitions ------------------------------------------------------------------------------------

    def _partition(self, job_id: str, index: int, attempt: int | None = None) -> Partition:
        """The live partition an event is about, or _Stale/_Illegal saying why the event cannot apply."""
        job = self._jobs.get(job_id)
        if job is None:
            raise StaleEvent(f"job {job_id} is not in the live view")
        if not 0 <= index < len(job.partitions):
            raise IllegalEvent(f"job {job_id}: expected a partition below {len(job.partitions)}, got {index}")
        partition = job.partitions[index]
        if partition.state in TERMINAL:
            raise StaleEvent(f"partition {partition.name} is already {partition.state.value}")
        if attempt is not None and attempt != partition.attempt:
            raise StaleEvent(f"partition {partition.name} is at attempt {partition.attempt}, not {attempt}")
        return partition

    def _move(self, partition: Partition, new: PartitionState) -> None:
        """The one place a partition changes state: checks legality, keeps the per-state counts."""
        old = partition.state
        try:
            check_partition_move(old, new, f"partition {partition.name}")
        except IllegalTransition as exc:
            raise IllegalEvent(str(exc)) from None
        job = partition.job
        partition.state = new
        job.version += 1
        self._states[old] -= 1
        self._states[new] += 1
        if old is P.PENDING:
            self._pending_by_priority[job.priority] -= 1
        if new is P.PENDING:
            self._pending_by_priority[job.priority] += 1
        if new is P.SYNTHESIZING:
            job.started = True
        if new in TERMINAL:
            self._partitions_total[(job.kind, new.value)] += 1
        if new is P.DONE:
            job.done += 1

    def _synthesis(
        self, job_id: str, index: int, attempt: int, new: PartitionState, reason: str | None = None
    ) -> dict[str, Any]:
        partition = self._partition(job_id, index, attempt)
        if new is P.FAILED:
            _expect(partition, P.SYNTHESIZING)
        self._move(partition, new)
        if reason is not None:
            partition.reason = reason
        return {}

    def _synthesis_finished(self, event: ev.SynthesisFinished) -> dict[str, Any]:
        partition = self._partition(event.job_id, event.partition, event.attempt)
        _expect(partition, P.SYNTHESIZING)
        self._move(partition, P.SYNTHESIZED)
        partition.synth_ms = event.synth_ms
        self._phases["synth"].observe(event.synth_ms / 1000)
        return {}

    def _end_partition(self, partition: Partition, at: float, new: PartitionState, reason: str) -> None:
        self._move(partition, new)
        partition.reason = reason
        if partition.lease is not None:
            self._end_lease(partition.lease, at)

    def _partition_ended(
        self, event: ev.PartitionFailed | ev.PartitionSkipped, new: PartitionState
    ) -> dict[str, Any]:
        partition = self._partition(event.job_id, event.partition)
        if event.token is not None and event.token != partition.lease:
            raise StaleEvent(f"lease {event.token} is not the live lease of partition {partition.name}")
        context = self._lease_context(partition.lease)
        self._end_partition(partition, event.at, new, readable_reason(event.reason))
        return context

    def _partition_retried(self, event: ev.PartitionRetried) -> dict[str, Any]:
        partition = self._partition(event.job_id, event.partition)
        if event.attempt <= partition.attempt:
            raise StaleEvent(f"partition {partition.name} is already at attempt {partition.attempt}")
        if partition.state is not P.PENDING:  # pending already when its worker's death requeued it
            self._requeue(partition, event.at)
        partition.attempt = event.attempt
        partition.reason = readable_reason(event.reason)
        self._retries += 1
        return {}

    def _requeue(self, partition: Partition, at: float) -> None:
        self._move(partition, P.PENDING)
        if partition.lease is not None:
            self._end_lease(partition.lease, at)
        partition.worker_id = None
        partition.synth_ms = partition.prove_ms = partition.finalize_ms = None

    # --- leases ----------------------------------------------------------------------------------------

    def _lease_granted(self, event: ev.LeaseGranted) -> dict[str, Any]:
        if event.token <= self._max_token:
            raise StaleEvent(f"lease {event.token} is not newer than lease {self._max_token}")
        partition = self._partition(event.job_id, event.partition, event.attempt)
        worker = self._workers.get(event.worker_id)
        if worker is None:
            raise IllegalEvent(f"expected a registered worker, got {event.worker_id}")
        if worker.current is not None:
            raise IllegalEvent(f"worker {worker.worker_id}: expected no current lease, got {worker.current}")
        if event.device != worker.device.name:
            raise IllegalEvent(
                f"worker {worker.worker_id}: expected device {worker.device.name}, got {event.device}"
            )
        self._move(partition, P.PROVING)
        self._max_token = event.token
        self._leases[event.token] = Lease(event.token, worker.worker_id, partition, event.at)
        worker.current = event.token
        worker.device.start(event.at)
        partition.lease, partition.worker_id = event.token, worker.worker_id
        return {}

    def _device_section_finished(self, event: ev.DeviceSectionFinished) -> dict[str, Any]:
        lease = self._leases.get(event.token)
        worker = self._workers.get(lease.worker_id) if lease else None
        if lease is None or worker is None or worker.current != event.token:
            raise StaleEvent(f"lease {event.token} is not a worker's current lease")
        self._move(lease.partition, P.FINALIZING)
        self._close_device_section(worker, lease, event.at)
        worker.current = None
        worker.finalizing[event.token] = None
        lease.partition.prove_ms = event.prove_ms
        self._phases["prove"].observe(event.prove_ms / 1000)
        return self._lease_context(event.token)

    def _finalize_finished(self, event: ev.FinalizeFinished) -> dict[str, Any]:
        lease = self._leases.get(event.token)
        worker = self._workers.get(lease.worker_id) if lease else None
        if lease is None or worker is None or event.token not in worker.finalizing:
            raise StaleEvent(f"lease {event.token} is not a finalizing lease")
        context = self._lease_context(event.token)
        partition = lease.partition
        self._move(partition, P.DONE)
        self._end_lease(event.token, event.at)
        partition.finalize_ms = event.finalize_ms
        self._phases["finalize"].observe(event.finalize_ms / 1000)
        self._history.count_partition(event.at)
        job = partition.job
        self._recent_partitions.append(
            RecentPartition(
                job.job_id,
                job.kind,
                partition.index,
                partition.synth_ms,
                partition.prove_ms,
                event.finalize_ms,
            )
        )
        return context

    def _end_lease(self, token: ev.LeaseToken, at: float) -> None:
        """The lease is over: its worker forgets it, its partition no longer holds it."""
        lease = self._leases.pop(token)
        worker = self._workers.get(lease.worker_id)
        if worker is not None:
            if worker.current == token:
                self._close_device_section(worker, lease, at)
                worker.current = None
            worker.finalizing.pop(token, None)
        lease.partition.lease = None

    def _close_device_section(self, worker: Worker, lease: Lease, at: float) -> None:
        seconds = max(0.0, at - lease.granted_at)
        self._busy_total[worker.worker_id] = self._busy_total.get(worker.worker_id, 0.0) + seconds
        interval = worker.device.stop(at)
        if interval is not None:
            self._history.add_busy(*interval)

    def _lease_context(self, token: ev.LeaseToken | None) -> dict[str, Any]:
        lease = self._leases.get(token) if token is not None else None
        if lease is None:
            return {}
        p = lease.partition
        return {"worker_id": lease.worker_id, "job_id": p.job.job_id, "partition": p.index}

    # --- workers ---------------------------------------------------------------------------------------

    def _worker_registered(self, event: ev.WorkerRegistered) -> dict[str, Any]:
        if event.worker_id in self._workers:
            raise IllegalEvent(f"expected a new worker id, got {event.worker_id} (already registered)")
        device = self._devices.get(event.device)
        if device is None:
            device = self._devices[event.device] = DeviceBusy(event.device, event.device_kind, event.at)
        self._workers[event.worker_id] = Worker(event.worker_id, device)
        self._busy_total.setdefault(event.worker_id, 0.0)
        return {}

    def _worker_died(self, event: ev.WorkerDied) -> dict[str, Any]:
        worker = self._workers.get(event.worker_id)
        if worker is None:
            raise StaleEvent(f"worker {event.worker_id} is not registered")
        tokens = ([worker.current] if worker.current is not None else []) + list(worker.finalizing)
        for token in tokens:
            partition = self._leases[token].partition
            self._requeue(partition, event.at)
            partition.reason = readable_reason(f"worker {worker.worker_id} died: {event.reason}")
        del self._workers[event.worker_id]
        return {"requeued": len(tokens)}

    # --- reading ---------------------------------------------------------------------------------------

    def invariants(self) -> list[str]:
        """Every broken invariant, in words; empty when all hold. Recomputed from scratch per ``seq``."""
        if self._invariants_at[0] != self._seq:
            self._invariants_at = (self._seq, self._check_invariants())
        return list(self._invariants_at[1])

    def _check_invariants(self) -> list[str]:
        problems: list[str] = []
        current = Counter(w.current for w in self._workers.values() if w.current is not None)
        finalizing = Counter(t for w in self._workers.values() for t in w.finalizing)
        for w in self._workers.values():
            if w.current is not None:
                lease = self._leases.get(w.current)
                if lease is None or lease.partition.state is not P.PROVING:
                    problems.append(f"worker {w.worker_id} is proving but its lease's partition is not")
            for token in w.finalizing:
                lease = self._leases.get(token)
                if lease is None or lease.partition.state is not P.FINALIZING:
                    problems.append(f"worker {w.worker_id} finalizes lease {token}, whose partition is not")
        states: Counter[PartitionState] = Counter()
        terminal: Counter[JobState] = Counter(self._pruned)
        for job in self._jobs.values():
            problems.extend(job.problems(current, finalizing))
            states.update(p.state for p in job.partitions)
            if job.outcome is not None:
                terminal[job.outcome] += 1
        if states[P.SYNTHESIZING] != self._states[P.SYNTHESIZING]:
            problems.append(
                f"active synthesis is {self._states[P.SYNTHESIZING]} "
                f"but {states[P.SYNTHESIZING]} partitions are synthesizing"
            )
        if +states != +self._states:
            problems.append(f"partition state counts {dict(+self._states)} != recount {dict(+states)}")
        problems.extend(self._memory.problems())
        for outcome in (JobState.DONE, JobState.FAILED, JobState.CANCELLED):
            counted = sum(n for (_, o), n in self._jobs_total.items() if o == outcome.value)
            if counted != terminal[outcome]:
                problems.append(f"{counted} jobs counted {outcome.value} but {terminal[outcome]} ended so")
        return problems

    def snapshot(self) -> StatusSnapshot:
        """A frozen, consistent view of everything, as ``GET /status`` serves it (``.to_json()``)."""
        now = self._clock()
        self._expire(now)
        live_devices = {w.device.name for w in self._workers.values()}
        devices = [d for d in self._devices.values() if d.name in live_devices]
        problems = self.invariants()
        return StatusSnapshot(
            version=self.version,
            boot_id=self.boot_id,
            seq=self._seq,
            taken_at=self._wall_clock(),
            uptime_secs=now - self._booted_at,
            invariants_ok=not problems,
            invariant_violations=tuple(problems),
            stale_events=self._stale,
            illegal_events=self._illegal,
            memory=self._memory_status(now),
            synthesis=SynthesisStatus(self._synth_max, self._states[P.SYNTHESIZING]),
            pipelines=tuple(self._pipeline(j, now) for j in self._jobs.values()),
            workers=tuple(self._worker_status(w, now) for w in self._workers.values()),
            devices=tuple(
                DeviceStatus(
                    d.name, d.kind, d.fraction(now), sum(w.device is d for w in self._workers.values())
                )
                for d in devices
            ),
            allocations=self._memory.allocations(now),
            counters=self._counters(),
            history=self._history_status(now, devices),
            recent_jobs=tuple(self._recent_job(j, now) for j in reversed(self._recent_jobs)),
            recent_partitions=tuple(self._recent_partitions),
        )

    def totals(self) -> TrackerTotals:
        """What ``/metrics`` renders: counters since boot and gauges now."""
        now = self._clock()
        self._expire(now)
        busy = dict(self._busy_total)
        for w in self._workers.values():
            if w.current is not None:
                busy[w.worker_id] += max(0.0, now - self._leases[w.current].granted_at)
        return TrackerTotals(
            partitions=MappingProxyType(dict(self._partitions_total)),
            jobs=MappingProxyType(dict(self._jobs_total)),
            phases=MappingProxyType({name: h.view() for name, h in self._phases.items()}),
            worker_busy_seconds=MappingProxyType(busy),
            workers_by_state=MappingProxyType(
                {s.value: sum(w.state is s for w in self._workers.values()) for s in WorkerState}
            ),
            device_busy_fraction=MappingProxyType({d.name: d.fraction(now) for d in self._devices.values()}),
            memory_reserved_bytes=self._memory.reserved_bytes,
            memory_budget_bytes=self._memory.total_bytes,
            memory_cached_bytes=self._memory.cached_bytes,
            queue_depth=self._states[P.PENDING],
            synthesis_active=self._states[P.SYNTHESIZING],
            stale_events=self._stale,
            illegal_events=self._illegal,
            events=self._seq,
            invariant_violations=len(self.invariants()),
            retries=self._retries,
        )

    def _pipeline(self, job: Job, now: float) -> PipelineStatus:
        if job.views is None or job.views[0] != job.version:
            # Partition views change only when a partition moves: rebuild them only then.
            views = tuple(p.status() for p in job.partitions)
            job.views = (job.version, views, partitions_json(views))
        if job.outcome is not None:
            state = job.outcome
        else:
            state = JobState.RUNNING if job.started else JobState.QUEUED
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
            partitions=job.views[1],
            partitions_json=job.views[2],
            reason=job.reason,
            failed_partition=job.failed_partition,
            circuit=job.circuit,
        )

    def _worker_status(self, worker: Worker, now: float) -> WorkerStatus:
        lease = self._leases[worker.current] if worker.current is not None else None
        busy = max(0.0, now - lease.granted_at) if lease is not None else 0.0
        finalizing = []
        for token in worker.finalizing:
            p = self._leases[token].partition
            finalizing.append(FinalizingLease(p.job.job_id, p.index, token))
        return WorkerStatus(
            worker_id=worker.worker_id,
            device=worker.device.name,
            state=worker.state,
            current_job=lease.partition.job.job_id if lease else None,
            current_partition=lease.partition.index if lease else None,
            current_token=lease.token if lease else None,
            busy_secs=busy,
            finalizing=tuple(finalizing),
            busy_seconds_total=self._busy_total.get(worker.worker_id, 0.0) + busy,
        )

    def _memory_status(self, now: float) -> MemoryStatus:
        memory = self._memory
        cached = memory.cached_bytes
        rss = self._process.memory_info().rss if self._process is not None else 0
        return MemoryStatus(
            total_bytes=memory.total_bytes,
            reserved_bytes=memory.reserved_bytes,
            available_bytes=max(0, memory.total_bytes - memory.reserved_bytes - cached),
            process_rss_bytes=rss,
            cached_bytes=cached,
            reservations=memory.reservations,
        )

    def _counters(self) -> CountersStatus:
        by: dict[str, dict[str, int]] = {o.value: {} for o in _JOB_OUTCOME.values()}
        for (kind, outcome), n in sorted(self._jobs_total.items()):
            by[outcome][kind] = n
        return CountersStatus(
            total_completed=sum(by[JobState.DONE].values()),
            total_failed=sum(by[JobState.FAILED].values()),
            total_cancelled=sum(by[JobState.CANCELLED].values()),
            completed_by_kind=MappingProxyType(by[JobState.DONE]),
            failed_by_kind=MappingProxyType(by[JobState.FAILED]),
            cancelled_by_kind=MappingProxyType(by[JobState.CANCELLED]),
            queue_depth=self._states[P.PENDING],
            queue_depth_by_priority=MappingProxyType(
                {k: n for k, n in self._pending_by_priority.items() if n}
            ),
            device_queue_depth=self._states[P.SYNTHESIZED],
            partitions_completed=sum(n for (_, o), n in self._partitions_total.items() if o == P.DONE),
            retries=self._retries,
            illegal_events=self._illegal,
        )

    def _history_status(self, now: float, devices: list[DeviceBusy]) -> HistoryStatus:
        open_intervals = [(d.busy_since, now) for d in devices if d.busy_since is not None]
        proofs, partitions, busy = self._history.series(now, len(devices), open_intervals)
        return HistoryStatus(MINUTE, proofs, partitions, busy)

    @staticmethod
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

    def _check_thread(self) -> None:
        ident = threading.get_ident()
        if self._owner_thread is None:
            self._owner_thread = ident
        elif ident != self._owner_thread and self.strict:
            raise IllegalTransition("StatusTracker.apply called from a second thread: post to the event loop")


def _expect(partition: Partition, state: PartitionState) -> None:
    if partition.state is not state:
        raise IllegalEvent(f"partition {partition.name}: expected {state.value}, got {partition.state.value}")


def _package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("prooflane")
    except PackageNotFoundError:
        return "0+unknown"
