"""The engine's shared state, and the outcomes every part of it uses: retry, fail, end, release.

Everything here runs on the event loop; no locks. Invariants kept by construction:

- a partition's reservation is live exactly while its partition is synthesizing, synthesized, proving or
  finalizing (or a worker still computes on it after its job ended; released when that returns);
- a partition is in at most one place: the pending queue, a synthesis task, the ready queue, or one worker;
- a job ends once (:meth:`Pipeline.end_job`), and only once the journal took its end: waiters are woken,
  and the end is shown, after that;
- a partition is done only once its proof is in the journal;
- while the journal cannot be written (``journal_problem``), no new job is accepted and no partition starts;
  what cannot be written waits (a job's end) or is done again later (a partition whose proof could not
  be stored), and a task tries the journal again every ``JOURNAL_RETRY_SECS``;
- every state change of a job or partition goes through the table in :mod:`prooflane.states`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, deque
from collections.abc import Callable, Coroutine
from typing import Any

from .. import events as ev
from ..config import Config
from ..errors import Unavailable
from ..kinds import CircuitMeta
from ..memory import MemoryBudget
from ..scheduler import WorkQueue
from ..states import JobState, PartitionState
from ..status.tracker import StatusTracker
from ..store import JournalUnwritable, Store
from . import logbook
from .records import JobRun, PartitionRun
from .tables import KeyTables

__all__ = ["Pipeline"]

log = logging.getLogger("prooflane.engine")
P = PartitionState
JOURNAL_RETRY_SECS = 1.0  # how often a journal that could not be written is tried again


class Pipeline:
    """What the engine's parts share: config, clock, tracker, budget, journal, queues and live jobs."""

    def __init__(self, config: Config, clock: Callable[[], float], tracker: StatusTracker) -> None:
        self.config = config
        self.clock = clock
        self.tracker = tracker
        self.watch: Callable[[ev.Event], None] | None = None  # called after each event (the health log)
        self.kick = asyncio.Event()  # set whenever the dispatcher may be able to start more work
        self.budget = MemoryBudget(config.memory_budget_bytes, emit=self.post, clock=clock)
        self.tables = KeyTables(self)  # which keys' fixed-base tables are stored (msm_tables = "auto")
        self.pending: WorkQueue[PartitionRun] = WorkQueue()
        self.ready: WorkQueue[PartitionRun] = WorkQueue()
        # Workers that synthesize their own partitions, waiting for one (the dispatcher hands the next
        # built-in partition to the first): (worker id, the future it waits on). Event loop only.
        self.takers: deque[tuple[str, asyncio.Future[PartitionRun]]] = deque()
        self.own_synthesis = False  # the built-in kinds' partitions go to takers, not the synthesis pool
        self.jobs: dict[str, JobRun] = {}  # live and recently ended jobs
        # The keys of the jobs not yet ended, each with how many of them prove it: what the budget's headroom
        # is taken over (a few keys, however many jobs). Invariant: counts the non-terminal jobs' keys.
        self._live_keys: Counter[str] = Counter()
        self._metas: dict[str, CircuitMeta] = {}
        self.store: Store | None = None
        self.progressed_at = clock()  # when a partition last moved (for the stall check of health)
        self.stopping = False  # set as the engine's stop begins: what ends from then on is its doing
        self.tg: asyncio.TaskGroup | None = None
        self.journal_problem: str | None = None  # why the journal cannot be written now (None: it can)
        self.journal_unreadable: str | None = None  # the first read of it that failed (damage: it stays)
        self._unwritten_ends: dict[JobRun, tuple[JobState, str | None, int | None]] = {}  # waiting for it

    def admitted(self, job: JobRun) -> None:
        """``job`` is live in the engine from now on."""
        self.jobs[job.job_id] = job
        self._live_keys[job.meta.key_path] += 1
        self._metas[job.meta.key_path] = job.meta

    def live_metas(self) -> list[CircuitMeta]:
        """The circuits (by key) of the jobs not yet ended."""
        return [self._metas[key] for key in self._live_keys]

    @property
    def journal(self) -> Store:
        """The open journal (503 when the engine is not running)."""
        if self.store is None:
            raise Unavailable("the engine is not running: start it first")
        return self.store

    def post(self, event: ev.Event) -> None:
        """Apply one event to the tracker (event loop only) and let the dispatcher look again."""
        self.tracker.apply(event)
        if isinstance(event, _PROGRESS) or (isinstance(event, ev.JobSubmitted) and not self._waiting()):
            self.progressed_at = event.at  # a job that arrives to an empty queue starts the stall clock
        if self.watch is not None:
            self.watch(event)
        self.kick.set()

    def _waiting(self) -> int:
        return len(self.pending) + len(self.ready)

    def stalled(self, busy_workers: int, live_workers: int) -> str | None:
        """Why the queue is stalled, or None: work waits, capacity is free, nothing moved for a while."""
        waiting = self._waiting()
        limit = self.config.stall_secs
        quiet = self.clock() - self.progressed_at
        if waiting and busy_workers < live_workers and quiet >= limit:
            return (
                f"queue stalled: {waiting} partitions wait, {live_workers - busy_workers} workers are free, "
                f"and nothing has moved for {quiet:.0f} s (stall_secs = {limit:g})"
            )
        return None

    # -- the journal ----------------------------------------------------------------------------------

    def write(self, call: Callable[[Store], None]) -> bool:
        """A journal write whose loss the engine survives (a state shown elsewhere, an attempt count):
        False, and the journal reported unwritable, when it could not be made."""
        try:
            call(self.journal)
        except JournalUnwritable as exc:
            self.journal_failed(exc)
            return False
        return True

    def journal_failed(self, exc: JournalUnwritable) -> None:
        """The journal refused a write: stop starting work and refuse jobs until it takes writes again."""
        if self.journal_problem is None:
            log.error("%s; new jobs are refused and no partition starts until it can be written", exc)
            self.spawn(self._retry_journal(), "journal retry")
        self.journal_problem = str(exc)

    async def _retry_journal(self) -> None:
        """Try the journal again until it takes writes; then write the job ends that waited for it."""
        while True:
            await asyncio.sleep(JOURNAL_RETRY_SECS)
            try:
                self.journal.probe()
                for job, (state, error, partition) in list(self._unwritten_ends.items()):
                    self._end(job, state, error, partition)
                    del self._unwritten_ends[job]
            except JournalUnwritable as exc:
                self.journal_problem = str(exc)
                continue
            self.journal_problem = None
            log.warning("the journal can be written again: jobs are accepted, partitions start")
            self.kick.set()
            return

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        """A task in the engine's task group (its failure stops the engine, loudly)."""
        if self.tg is None:
            coro.close()
            raise asyncio.CancelledError("the engine is not running")
        try:
            return self.tg.create_task(coro, name=name)
        except RuntimeError:  # the task group is shutting down: the engine is stopping
            coro.close()  # never started: close it, so nothing warns of a coroutine never awaited
            raise asyncio.CancelledError("the engine is stopping") from None

    # -- outcomes -------------------------------------------------------------------------------------

    def retry(self, part: PartitionRun, reason: str, *, blame: bool = True) -> None:
        """Give the partition another attempt from the start. ``blame``: the attempt ended while the
        partition's own work ran where a process died; after ``max_attempts`` of those its job fails (a
        partition that kills whatever runs it). An attempt that merely shared a worker or a pool with
        the death is retried without limit: it did not cause it."""
        self.release(part)
        if not part.live:
            return
        part.synthesized, part.token, part.worker_id = None, None, None
        part.failures += blame
        if part.failures >= self.config.max_attempts:
            self.fail_partition(
                part,
                f"{reason} (attempt {part.attempt}; failed {part.failures} of max_attempts "
                f"{self.config.max_attempts} times)",
            )
            return
        part.attempt += 1
        part.move(P.PENDING)
        self.write(lambda j: j.set_partition(part.job.job_id, part.index, P.PENDING, attempts=part.attempt))
        self.post(
            ev.PartitionRetried(
                at=self.clock(), job_id=part.job.job_id, partition=part.index, attempt=part.attempt,
                reason=reason,
            )
        )  # fmt: skip
        self.pending.push(part.key, part)
        self.kick.set()

    def fail_partition(self, part: PartitionRun, reason: str) -> None:
        """The partition failed for good: its job fails, naming it."""
        part.error = reason
        self.release(part)
        if part.live:
            part.move(P.FAILED)
            self.write(lambda j: j.set_partition(part.job.job_id, part.index, P.FAILED, error=reason))
            self.end_job(part.job, JobState.FAILED, f"partition {part.index} failed: {reason}", part.index)

    def end_job(self, job: JobRun, state: JobState, error: str | None, partition: int | None = None) -> None:
        """End the job once: journal first, then free its queued work, post the event, wake waiters.

        When the journal cannot take the end, the job does not end yet: its end waits for the journal (the
        first end asked for is the one written)."""
        if job.state.terminal or job in self._unwritten_ends:
            return
        try:
            self._end(job, state, error, partition)
        except JournalUnwritable as exc:
            self._unwritten_ends[job] = (state, error, partition)
            self.journal_failed(exc)

    def _end(self, job: JobRun, state: JobState, error: str | None, partition: int | None) -> None:
        finished_at = time.time()
        self.journal.end_job(
            job.job_id, state, error=error, finished_at=finished_at,
            close_partitions=None if state is JobState.DONE else P.CANCELLED,
        )  # fmt: skip
        job.move(state)
        job.error, job.finished_at = error, finished_at
        self._live_keys[job.meta.key_path] -= 1
        if not self._live_keys[job.meta.key_path]:
            del self._live_keys[job.meta.key_path]
        for part in self.pending.remove_job(job.job_id) + self.ready.remove_job(job.job_id):
            self.release(part)
        for part in job.partitions:
            if not part.state.terminal:
                part.move(P.CANCELLED)
            if part.task is not None:
                part.task.cancel()  # its reservation is released as the task ends
        self.post(_job_ended(job.job_id, state, error, partition, self.clock()))
        logbook.job_ended(job, state, error, partition)
        job.ended.set()
        asyncio.get_running_loop().call_later(self.config.live_retention_secs, self._forget, job)
        self.kick.set()

    def release(self, part: PartitionRun) -> None:
        """Give back the partition's reservation and drop its synthesized data."""
        if part.reservation is not None:
            part.reservation.release()
            part.reservation = None
        part.synthesized = None

    def _forget(self, job: JobRun) -> None:
        if self.jobs.get(job.job_id) is job:
            del self.jobs[job.job_id]


# A partition that moved, or a job that ended: the stall check's evidence of progress. A submission is not
# (work waiting is what a stall is made of; one to an empty queue only starts the clock), and neither is a
# cancel.
_PROGRESS = (
    ev.SynthesisStarted, ev.SynthesisFinished, ev.LeaseGranted, ev.DeviceSectionFinished,
    ev.FinalizeFinished, ev.PartitionRetried, ev.JobDone, ev.JobFailed,
)  # fmt: skip


def _job_ended(job_id: str, state: JobState, error: str | None, partition: int | None, at: float) -> ev.Event:
    match state:
        case JobState.DONE:
            return ev.JobDone(at=at, job_id=job_id)
        case JobState.FAILED:
            return ev.JobFailed(at=at, job_id=job_id, reason=error or "failed", partition=partition)
        case JobState.CANCELLED:
            return ev.JobCancelled(at=at, job_id=job_id, reason=error or "cancelled")
        case _:
            raise AssertionError(f"expected a terminal state, got {state}")
