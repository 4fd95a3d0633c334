"""The status tracker's fold: the engine's events in, one consistent state out. No busy worker shows idle.

One writer, no lock. The state (:class:`~prooflane.status.records.Records`) changes only in
:meth:`StatusTracker.apply`, on the event loop; threads and processes post events with
``loop.call_soon_threadsafe(tracker.apply, event)``. Reads run on the same loop, so each sees the state
between two events: the read-out (snapshots, totals) is :mod:`prooflane.status.readout`, the invariant check
:mod:`prooflane.status.invariants`, failure-reason cleaning :mod:`prooflane.status.reasons`.

Leases. Each :class:`~prooflane.events.LeaseGranted` makes its token the worker's *current lease*;
:class:`~prooflane.events.DeviceSectionFinished` moves it to the worker's *finalizing leases*;
:class:`~prooflane.events.FinalizeFinished` removes it. An event about leased work applies only while its
token is live where that event expects it; otherwise it is *stale*: dropped and counted, so no "end" can clear
a later "start". Events about a job no longer in the live view, a terminal partition or an older attempt are
stale too. Worker states are computed from these facts, never stored.

Partition transitions follow the one table of :mod:`prooflane.states` (docs/status.md gives the event that
makes each); anything else is *illegal*: :class:`~prooflane.errors.IllegalTransition` in strict mode (the
tests), counted and ignored in production.

A job ends once, is counted once, stays in the live view for ``retention_secs`` after its end, then leaves it
by a :class:`~prooflane.events.JobExpired` the tracker folds in itself (on the next event, read, or a timer on
the running loop), so the live view never changes without ``seq`` moving.
"""

from __future__ import annotations

import enum
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, assert_never

from .. import events as ev
from .._version import __version__
from ..errors import IllegalTransition
from ..states import (
    LIVE_PARTITION_STATES,
    PARTITION_TRANSITIONS,
    TERMINAL_PARTITION_STATES,
    JobState,
    PartitionState,
    WorkerState,
    check_partition_move,
)
from . import readout, records
from .encode import to_json_text
from .expiry import ExpiryTimer
from .feed import EventFeed, Subscription
from .invariants import InvariantCheck
from .readout import SnapshotHead, TrackerTotals
from .reasons import readable_reason
from .records import IllegalEvent, Job, Lease, Partition, Records, StaleEvent, TrackerConfig, Worker
from .rss import ProcessMemory
from .snapshot import Health, StatusSnapshot
from .timing import DeviceBusy

__all__ = [
    "LEGAL_TRANSITIONS",
    "Health",
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


class Outcome(enum.StrEnum):
    """What :meth:`StatusTracker.apply` did with an event."""

    APPLIED = "applied"
    STALE = "stale"
    ILLEGAL = "illegal"


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
        self.version = version or __version__
        self.feed = EventFeed(self.config.feed_capacity, self.config.feed_subscriber_queue)
        self._clock = clock
        self._wall_clock = wall_clock
        self._booted_at = clock()
        self._owner_thread: int | None = None
        self._memory = ProcessMemory() if self.config.sample_rss else None
        # Written only by apply() on the event loop (see the module docstring).
        self._r = Records.new(self.config)
        self._invariants_at: tuple[int, list[str]] = (-1, [])
        self._check_invariants = InvariantCheck()
        self._expiry = ExpiryTimer(clock, self.expire)  # the oldest ended job's, on a running loop

    # --- writing ---------------------------------------------------------------------------------------

    @property
    def seq(self) -> int:
        """The id of the last event received (applied or dropped)."""
        return self._r.seq

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
        return self._r.seq

    def _expire(self, now: float) -> None:
        retention = self.config.retention_secs
        while self._r.ended and now - (self._r.ended[0].ended_at or 0.0) >= retention:
            self._check_thread()  # leaving the view is a write: on the event loop only
            job = self._r.ended[0]
            self._fold(ev.JobExpired(at=(job.ended_at or 0.0) + retention, job_id=job.job_id))

    def _arm_expiry(self) -> None:
        if self._r.ended:
            self._expiry.arm((self._r.ended[0].ended_at or 0.0) + self.config.retention_secs)

    def _fold(self, event: ev.Event) -> Outcome:
        self._r.seq += 1
        try:
            context = self._dispatch(event)
            outcome = Outcome.APPLIED
        except StaleEvent as stale:
            self._r.stale += 1
            outcome, context = Outcome.STALE, {"detail": str(stale)}
        except IllegalEvent as illegal:
            self._r.illegal += 1
            outcome, context = Outcome.ILLEGAL, {"detail": str(illegal)}
        self.feed.publish(self._r.seq, event, outcome.value, context)
        if outcome is Outcome.ILLEGAL and self.strict:
            raise IllegalTransition(f"{ev.event_name(event)}: {context['detail']}")
        return outcome

    def subscribe(self, last_event_id: int | None = None) -> Subscription:
        """The event stream for SSE (see :class:`prooflane.status.feed.Subscription`)."""
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
            case ev.JournalChecked():
                self._r.journal_disagreements = event.disagreements
                self._r.journal_disagreed += bool(event.disagreements)
                return {}
            case ev.SynthesisStarted():
                return self._synthesis_started(event)
            case ev.SynthesisFinished():
                return self._synthesis_finished(event)
            case ev.SynthesisFailed():
                reason = readable_reason(event.reason)
                return self._synthesis(event.job_id, event.partition, event.attempt, P.FAILED, reason)
            case ev.SynthesisPoolSized():
                self._r.synth_max = event.max_concurrent
                return {}
            case ev.LeaseGranted():
                return self._lease_granted(event)
            case ev.DeviceSectionFinished():
                return self._device_section_finished(event)
            case ev.FinalizeFinished():
                return self._finalize_finished(event)
            case ev.PartitionFailed():
                return self._partition_ended(event, P.FAILED)
            case ev.PartitionRetried():
                return self._partition_retried(event)
            case ev.WorkerRegistered():
                return self._worker_registered(event)
            case ev.WorkerDied() | ev.WorkerLost():
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
                self._r.ledger_for(event).apply(event)
                return {}
            case ev.TablesChanged():
                self._r.tables[event.key] = records.tables_status(event)
                return {}
            case _:
                assert_never(event)

    # --- jobs ------------------------------------------------------------------------------------------

    def _job_submitted(self, event: ev.JobSubmitted) -> dict[str, Any]:
        if event.job_id in self._r.jobs:
            raise StaleEvent(f"job {event.job_id} is already known")
        done = set(event.done_partitions)
        if event.partitions < 1 or not done <= set(range(event.partitions)):
            raise IllegalEvent(
                f"job {event.job_id}: expected partitions >= 1 and done_partitions within them, "
                f"got {event.partitions} and {sorted(done)}"
            )
        job = Job(event.job_id, event.kind, event.priority, event.at, event.circuit, started=bool(done))
        job.partitions = [Partition(job, i) for i in range(event.partitions)]
        self._r.jobs[job.job_id] = job
        self._r.states[P.PENDING] += event.partitions
        self._r.pending_by_priority[job.priority] += event.partitions
        for index in sorted(done):
            partition = job.partitions[index]
            self._r.states[P.PENDING] -= 1
            self._r.pending_by_priority[job.priority] -= 1
            partition.state = P.DONE
            job.done += 1
            self._r.states[P.DONE] += 1
        return {}

    def _job_done(self, event: ev.JobDone) -> dict[str, Any]:
        job = self._live_job(event.job_id)
        if job.done != len(job.partitions):
            raise IllegalEvent(
                f"job {job.job_id}: expected all {len(job.partitions)} partitions done, got {job.done}"
            )
        self._end_job(job, event.at, JobState.DONE, None, None)
        self._r.history.count_proof(event.at)
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
        self._r.count_end(job)

    def _live_job(self, job_id: str) -> Job:
        job = self._r.jobs.get(job_id)
        if job is None:
            raise StaleEvent(f"job {job_id} is not in the live view")
        if job.outcome is not None:
            raise StaleEvent(f"job {job_id} already ended ({job.outcome.value})")
        return job

    def _job_expired(self, event: ev.JobExpired) -> dict[str, Any]:
        job = self._r.jobs.get(event.job_id)
        if job is None:
            raise StaleEvent(f"job {event.job_id} is not in the live view")
        if job.outcome is None:
            raise IllegalEvent(f"job {job.job_id}: expected an ended job to expire, got one still running")
        if self._r.ended[0] is job:
            self._r.ended.popleft()
        else:
            self._r.ended.remove(job)
        del self._r.jobs[job.job_id]
        self._r.pruned[job.outcome] += 1
        for partition in job.partitions:
            self._r.states[partition.state] -= 1
        return {"job_state": job.outcome.value}

    # --- partitions ------------------------------------------------------------------------------------

    def _partition(self, job_id: str, index: int, attempt: int | None = None) -> Partition:
        """The live partition an event is about, or _Stale/_Illegal saying why the event cannot apply."""
        job = self._r.jobs.get(job_id)
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
        partition.state = new  # bumps job.version: its cached views are rebuilt at the next read
        self._r.states[old] -= 1
        self._r.states[new] += 1
        if old is P.PENDING:
            self._r.pending_by_priority[job.priority] -= 1
        if new is P.PENDING:
            self._r.pending_by_priority[job.priority] += 1
        if new is P.SYNTHESIZING:
            job.started = True
        if new in TERMINAL:
            self._r.partitions_total[(job.kind, new.value)] += 1
        if new is P.DONE:
            job.done += 1

    def _synthesis(
        self, job_id: str, index: int, attempt: int, new: PartitionState, reason: str | None = None
    ) -> dict[str, Any]:
        partition = self._partition(job_id, index, attempt)
        if new is P.FAILED:
            partition.expect(P.SYNTHESIZING)
        self._move(partition, new)
        if reason is not None:
            partition.reason = reason
        return {}

    def _synthesis_started(self, event: ev.SynthesisStarted) -> dict[str, Any]:
        context = self._synthesis(event.job_id, event.partition, event.attempt, P.SYNTHESIZING)
        if event.worker_id is not None:  # its own process synthesizes it: the worker is busy with it
            partition = self._partition(event.job_id, event.partition, event.attempt)
            partition.worker_id = event.worker_id
            self._r.workers[event.worker_id].synthesizing = (partition, event.attempt, event.at)
        return context

    def _synthesis_finished(self, event: ev.SynthesisFinished) -> dict[str, Any]:
        partition = self._partition(event.job_id, event.partition, event.attempt)
        partition.expect(P.SYNTHESIZING)
        self._move(partition, P.SYNTHESIZED)
        partition.synth_ms = event.synth_ms
        self._r.phases["synth"].observe(event.synth_ms / 1000)
        return {}

    def _end_partition(self, partition: Partition, at: float, new: PartitionState, reason: str) -> None:
        self._move(partition, new)
        partition.reason = reason
        if partition.lease is not None:
            self._end_lease(partition.lease, at)

    def _partition_ended(self, event: ev.PartitionFailed, new: PartitionState) -> dict[str, Any]:
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
        self._r.retries += 1
        return {}

    def _requeue(self, partition: Partition, at: float) -> None:
        self._move(partition, P.PENDING)
        if partition.lease is not None:
            self._end_lease(partition.lease, at)
        partition.worker_id = None
        partition.synth_ms = partition.prove_ms = partition.finalize_ms = None

    # --- leases ----------------------------------------------------------------------------------------

    def _lease_granted(self, event: ev.LeaseGranted) -> dict[str, Any]:
        if event.token <= self._r.max_token:
            raise StaleEvent(f"lease {event.token} is not newer than lease {self._r.max_token}")
        partition = self._partition(event.job_id, event.partition, event.attempt)
        worker = self._r.workers.get(event.worker_id)
        if worker is None or not worker.live:
            shown = f"{event.worker_id} ({worker.state.value})" if worker else event.worker_id
            raise IllegalEvent(f"expected a live registered worker, got {shown}")
        if worker.current is not None:
            raise IllegalEvent(f"worker {worker.worker_id}: expected no current lease, got {worker.current}")
        if event.device != worker.device.name:
            raise IllegalEvent(
                f"worker {worker.worker_id}: expected device {worker.device.name}, got {event.device}"
            )
        self._move(partition, P.PROVING)
        self._r.max_token = event.token
        self._r.leases[event.token] = Lease(event.token, worker.worker_id, partition, event.at)
        worker.current = event.token
        worker.device.start(event.at)
        partition.lease, partition.worker_id = event.token, worker.worker_id
        return {}

    def _device_section_finished(self, event: ev.DeviceSectionFinished) -> dict[str, Any]:
        lease = self._r.leases.get(event.token)
        worker = self._r.workers.get(lease.worker_id) if lease else None
        if lease is None or worker is None or worker.current != event.token:
            raise StaleEvent(f"lease {event.token} is not a worker's current lease")
        self._move(lease.partition, P.FINALIZING)
        self._close_device_section(worker, lease, event.at)
        worker.current = None
        worker.finalizing[event.token] = event.at
        lease.partition.prove_ms = event.prove_ms
        self._r.phases["prove"].observe(event.prove_ms / 1000)
        return self._lease_context(event.token)

    def _finalize_finished(self, event: ev.FinalizeFinished) -> dict[str, Any]:
        lease = self._r.leases.get(event.token)
        worker = self._r.workers.get(lease.worker_id) if lease else None
        if lease is None or worker is None or event.token not in worker.finalizing:
            raise StaleEvent(f"lease {event.token} is not a finalizing lease")
        context = self._lease_context(event.token)
        partition = lease.partition
        self._move(partition, P.DONE)
        self._end_lease(event.token, event.at)
        partition.finalize_ms = event.finalize_ms
        self._r.phases["finalize"].observe(event.finalize_ms / 1000)
        self._r.history.count_partition(event.at)
        self._r.partitions_done.count(event.at)
        recent = partition.recent()
        self._r.recent_partitions.append(recent)
        self._r.recent_partitions_text.append(to_json_text(recent))
        return context

    def _end_lease(self, token: ev.LeaseToken, at: float) -> None:
        """The lease is over: its worker forgets it, its partition no longer holds it."""
        lease = self._r.leases.pop(token)
        worker = self._r.workers.get(lease.worker_id)
        if worker is not None:
            if worker.current == token:
                self._close_device_section(worker, lease, at)
                worker.current = None
            worker.finalizing.pop(token, None)
        lease.partition.lease = None

    def _close_device_section(self, worker: Worker, lease: Lease, at: float) -> None:
        seconds = max(0.0, at - lease.granted_at)
        self._r.busy_total[worker.worker_id] = self._r.busy_total.get(worker.worker_id, 0.0) + seconds
        interval = worker.device.stop(at)
        if interval is not None:
            self._r.history.add_busy(*interval)

    def _lease_context(self, token: ev.LeaseToken | None) -> dict[str, Any]:
        lease = self._r.leases.get(token) if token is not None else None
        if lease is None:
            return {}
        p = lease.partition
        return {"worker_id": lease.worker_id, "job_id": p.job.job_id, "partition": p.index}

    # --- workers ---------------------------------------------------------------------------------------

    def _worker_registered(self, event: ev.WorkerRegistered) -> dict[str, Any]:
        worker = self._r.workers.get(event.worker_id)
        if worker is not None and worker.live:
            raise IllegalEvent(f"expected a new or a dead worker id, got {event.worker_id} (live)")
        if worker is None:
            self._list(event.worker_id, event.device, event.device_kind, event.node, event.at)
        else:  # its processes were replaced: live again (maybe elsewhere), with its history
            device = self._device(event.device, event.device_kind, event.at)
            worker.device, worker.node, worker.down = device, event.node, None
        return {}

    def _list(self, worker_id: str, device: str, kind: str, node: str | None, at: float) -> Worker:
        worker = Worker(worker_id, self._device(device, kind, at), node)
        self._r.workers[worker_id] = worker
        self._r.busy_total.setdefault(worker_id, 0.0)
        return worker

    def _device(self, name: str, kind: str, at: float) -> DeviceBusy:
        if name not in self._r.devices:
            self._r.devices[name] = DeviceBusy(name, kind, at)
        return self._r.devices[name]

    def _worker_died(self, event: ev.WorkerDied | ev.WorkerLost) -> dict[str, Any]:
        """WorkerDied: restarting; WorkerLost: lost. Either way its leases end, their partitions requeued."""
        down = WorkerState.LOST if isinstance(event, ev.WorkerLost) else WorkerState.RESTARTING
        worker = self._r.workers.get(event.worker_id)
        if worker is None and isinstance(event, ev.WorkerLost):  # it never started: list it, lost
            if event.device is None:
                raise IllegalEvent(f"expected a registered worker or a device, got {event.worker_id} alone")
            worker = self._list(event.worker_id, event.device, event.device_kind, event.node, event.at)
        if worker is None:
            raise StaleEvent(f"worker {event.worker_id} is not registered")
        if worker.down is WorkerState.LOST or worker.down is down:
            raise StaleEvent(f"worker {worker.worker_id} is already {worker.state.value}")
        tokens = ([worker.current] if worker.current is not None else []) + list(worker.finalizing)
        for token in tokens:
            partition = self._r.leases[token].partition
            self._requeue(partition, event.at)
            partition.reason = readable_reason(f"worker {worker.worker_id} died: {event.reason}")
        worker.down, worker.last_error = down, readable_reason(event.reason)
        if down is WorkerState.RESTARTING:
            worker.restarts, worker.last_restart_at = worker.restarts + 1, event.at
        return {"requeued": len(tokens)}

    # --- reading ---------------------------------------------------------------------------------------

    @property
    def records(self) -> Records:
        """The live records, for the read-out and the invariant check; never change them outside ``apply``."""
        return self._r

    def invariants(self) -> list[str]:
        """Every broken invariant, in words; empty when all hold. Checked again at every new ``seq`` (a job's
        own facts recounted when it changed: :class:`prooflane.status.invariants.InvariantCheck`), and
        after them what the last comparison with the journal found (:meth:`journal_checked`)."""
        if self._invariants_at[0] != self._r.seq:
            self._invariants_at = (self._r.seq, self._check_invariants(self._r))
        return [*self._invariants_at[1], *self._r.journal_disagreements]

    def journal_checked(self) -> None:
        """The engine compared the live view with the journal (:mod:`prooflane.engine.journal_check`; what
        it found, when that changed, came as a ``JournalChecked`` event): counted, and when."""
        self._r.journal_checks += 1
        self._r.journal_checked_at = self._clock()

    def health(self, *extra_reasons: str) -> Health:
        """Whether every listed device has a live worker (and which have none); ``extra_reasons``, the
        caller's own (a stalled queue, say), count against it too. Served in ``/status`` and ``/metrics``."""
        return readout.health(self._r, self._clock(), extra_reasons)

    def snapshot(self, *health_reasons: str) -> StatusSnapshot:
        """A frozen, consistent view of everything, as ``GET /status`` serves it (``.to_json()``);
        ``health_reasons`` as for :meth:`health`."""
        now = self._clock()
        self._expire(now)
        rss = self._memory.sample(now, self._r.seq) if self._memory is not None else None
        head = SnapshotHead(
            version=self.version,
            boot_id=self.boot_id,
            taken_at=self._wall_clock(),
            uptime_secs=now - self._booted_at,
            process_rss_bytes=rss.process if rss is not None else 0,
            invariant_violations=tuple(self.invariants()),
            health_reasons=health_reasons,
            tree_rss_bytes=rss.tree if rss is not None else 0,
        )
        return readout.snapshot(self._r, now, head)

    def totals(self, *health_reasons: str) -> TrackerTotals:
        """What ``/metrics`` renders: counters since boot and gauges now (``health_reasons``: see health)."""
        now = self._clock()
        self._expire(now)
        return readout.totals(self._r, now, len(self.invariants()), health_reasons)

    def _check_thread(self) -> None:
        ident = threading.get_ident()
        if self._owner_thread is None:
            self._owner_thread = ident
        elif ident != self._owner_thread and self.strict:
            raise IllegalTransition("StatusTracker.apply called from a second thread: post to the event loop")
