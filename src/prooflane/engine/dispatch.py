"""The dispatcher: partitions in scheduler order, each with its memory reserved, into synthesis.

It always takes the head of the pending queue (priority, then job arrival, then partition index): when the
head's reservation does not fit, nothing overtakes it. Synthesis runs on the backend's CPU pool; a
synthesized partition waits in the ready queue for a device worker.

How many partitions synthesize at once (the *slots*) adapts to what the work costs, between
``synthesis_workers`` and ``synthesis_workers_max``: when a synthesis ends with nothing ready for the
devices while partitions still wait for synthesis, more often in a row than filling every worker once can
explain, the devices are waiting on synthesis and a slot is added; when syntheses keep ending with the
ready queue full, the devices are the bottleneck and a slot is taken away (docs/engine.md, "Circom
circuits").

Where every worker synthesizes the partitions it proves itself (a ``cpu`` worker of the process backend,
which finishes its partitions too: docs/engine.md, "What the layout is, and why"), the built-in kinds'
partitions go to the first worker waiting for one (``Pipeline.takers``), in the same order and with the same
reservation, and not to the pool: the whole partition then runs in one process, as a plain prover runs it.
Circom partitions (whose generators are untrusted code, bounded by the pool's limits) still go to the pool.

A synthesis runs at most ``synthesis_timeout_secs``: past it the backend ends the process that runs it and
the partition fails, naming the limit (a circuit's witness generator that never returns, or an input that
makes a legitimate one loop for ever). A synthesis that has run ``long_synthesis_secs`` counts against its
own job's slots only: the partitions of other jobs may take the slot it held (they overtake the partitions
of its job, the one exception to the queue's order), so one stuck synthesis holds one process, never every
slot, while a circuit whose every synthesis is long keeps the slots it had.
"""

from __future__ import annotations

import asyncio
import functools
from collections import Counter

from .. import events as ev
from ..devices.backend import DeviceBackend, PoolProcessDied, PoolReplaced, PoolTimedOut
from ..kinds import StorageInput, SynthesisTask, reservation_bytes, synthesize_partition, witness_memory_bytes
from ..scheduler import WorkKey
from ..states import JobState, PartitionState
from ..store import Store
from .pipeline import Pipeline
from .records import PartitionRun
from .tables import counted_up_front

__all__ = ["Dispatcher", "long_synthesis_secs"]

P = PartitionState
LONG_SYNTHESIS_SECS = 10.0


def long_synthesis_secs(timeout_secs: float) -> float:
    """How long a synthesis runs before it counts against its own job's slots only: 10 s, or half
    ``synthesis_timeout_secs`` where that is less (the built-in kinds synthesize a partition in well under a
    second)."""
    return min(LONG_SYNTHESIS_SECS, timeout_secs / 2)


class Dispatcher:
    """Moves partitions from pending to synthesizing to ready, within the budget and the pool's size."""

    def __init__(self, pipeline: Pipeline, backend: DeviceBackend) -> None:
        self._pipeline = pipeline
        self._backend = backend
        self.active = 0  # synthesis tasks running; invariant: == partitions in state synthesizing
        cfg = pipeline.config
        self.slots = cfg.synthesis_workers  # invariant: synthesis_workers <= slots <= synthesis_workers_max
        self._workers = workers = len(cfg.devices) * cfg.workers_per_device
        # Syntheses in a row that ended with nothing ready while partitions pended. Filling W idle workers
        # ends W + 1 of them so (each taken at once, then one more before the first device section ends),
        # however fast synthesis is: growing needs one more.
        self._starved, self._starved_limit = 0, workers + 2
        self._fed, self._fed_limit = 0, 4 * workers  # in a row that ended with the ready queue full
        # When each running synthesis started (event loop only): a key for each partition synthesizing.
        self._started: dict[PartitionRun, float] = {}
        self._long_secs = long_synthesis_secs(cfg.synthesis_timeout_secs)

    async def run(self) -> None:
        """Take partitions in scheduler order, reserve memory for each (atomically), start its synthesis."""
        pipeline = self._pipeline
        while True:
            pipeline.kick.clear()
            while (head := self._next()) is not None:
                key, part = head
                reservation = pipeline.budget.try_reserve(
                    f"{part.name}#{part.attempt}", self._reservation_bytes(part), headroom=self._headroom()
                )
                if reservation is None:
                    break  # the oldest highest-priority partition waits; nothing overtakes it
                pipeline.pending.take(key)
                part.reservation = reservation
                part.move(P.SYNTHESIZING)
                if part.job.state is JobState.QUEUED:  # running from its first synthesis, as the tracker says
                    part.job.move(JobState.RUNNING)
                    pipeline.write(functools.partial(_mark_running, part.job.job_id))
                if self._own(part):
                    self._hand_to_worker(part)
                    continue
                self.active += 1
                self._started[part] = pipeline.clock()
                # Looked at again once it has run long (its slot may then go to another job).
                asyncio.get_running_loop().call_later(self._long_secs, pipeline.kick.set)
                # Said in the same turn as the partition leaves the queue: the queue depth shown is
                # what waits, at every turn (engine/journal_check.py checks it).
                pipeline.post(
                    ev.SynthesisStarted(
                        at=pipeline.clock(),
                        job_id=part.job.job_id,
                        partition=part.index,
                        attempt=part.attempt,
                    )
                )
                part.task = pipeline.spawn(self._synthesize(part), f"synthesize {part.name}")
                # A callback, not a ``finally``: a task cancelled before it starts never runs its body.
                part.task.add_done_callback(functools.partial(self._synthesis_ended, part))
            await pipeline.kick.wait()

    def _synthesis_ended(self, part: PartitionRun, task: asyncio.Task[None]) -> None:
        """Whatever way the synthesis task ended (even cancelled before it ran): count it, free its slot."""
        self.active -= 1
        self._started.pop(part, None)
        part.task = None
        if task.cancelled():
            self._pipeline.release(part)
        self._pipeline.kick.set()

    def _next(self) -> tuple[WorkKey, PartitionRun] | None:
        """The partition to synthesize next, if one may start: the head of the queue, but for the jobs
        whose syntheses run long, which count their own long ones against the slots. A partition a worker
        synthesizes itself starts once a worker waits for one."""
        pipeline = self._pipeline
        if pipeline.journal_problem is not None:  # a proof made now could not be stored
            return None
        long = self._long_by_job()
        short = self.active - sum(long.values())
        if not long:
            head = pipeline.pending.peek()
            return head if head is not None and self._may_start(head[1].job.job_id, short) else None
        return pipeline.pending.first(lambda job_id: self._may_start(job_id, short + long[job_id]))

    def _may_start(self, job_id: str, held: int) -> bool:
        """Whether a partition of ``job_id`` may start now, where ``held`` syntheses of the pool count against
        its slots: one a worker synthesizes itself needs a worker waiting; one for the pool, room there."""
        if self._own(self._pipeline.jobs[job_id].partitions[0]):
            return self._taker() is not None
        return self._room(held)

    def _own(self, part: PartitionRun) -> bool:
        """Whether a worker synthesizes ``part`` itself (a built-in kind's, where every worker does)."""
        return self._pipeline.own_synthesis and isinstance(part.job.inputs[part.index], StorageInput)

    def _taker(self) -> tuple[str, asyncio.Future[PartitionRun]] | None:
        """The first worker still waiting for a partition of its own to synthesize (those that stopped
        waiting, a death or a ready partition taken instead, are dropped)."""
        takers = self._pipeline.takers
        while takers and takers[0][1].done():
            takers.popleft()
        return takers[0] if takers else None

    def _hand_to_worker(self, part: PartitionRun) -> None:
        """``part`` (reserved, synthesizing) to the first waiting worker, which synthesizes it itself."""
        taker = self._taker()
        assert taker is not None, "a partition of its own handed with no worker waiting"
        self._pipeline.takers.popleft()
        worker_id, future = taker
        self._pipeline.post(
            ev.SynthesisStarted(
                at=self._pipeline.clock(), job_id=part.job.job_id, partition=part.index,
                attempt=part.attempt, worker_id=worker_id,
            )
        )  # fmt: skip
        future.set_result(part)

    def capacity(self) -> int:
        """The most partitions that may synthesize at once: the pool's slots, and each worker that
        synthesizes its own (what ``/status`` shows as ``synthesis.max_concurrent``)."""
        return self.slots + (self._workers if self._pipeline.own_synthesis else 0)

    def _room(self, held: int) -> bool:
        """Whether another synthesis may start where ``held`` syntheses count against the slots."""
        cfg = self._pipeline.config
        return held < self.slots and held + len(self._pipeline.ready) < cfg.prefetch_partitions + self.slots

    def _long_by_job(self) -> Counter[str]:
        """The syntheses running for ``long_synthesis_secs`` or more, by job."""
        since = self._pipeline.clock() - self._long_secs
        return Counter(part.job.job_id for part, started in self._started.items() if started <= since)

    def overdue(self) -> list[str]:
        """A health reason for each synthesis running past ``synthesis_timeout_secs`` (its process is being
        ended: for a moment on the process backend, for as long as it runs where none can be ended)."""
        now, limit = self._pipeline.clock(), self._pipeline.config.synthesis_timeout_secs
        return [
            f"partition {part.name} has been synthesizing for {now - started:.0f} s, past its limit "
            f"(synthesis_timeout_secs = {limit:g})"
            for part, started in self._started.items()
            if now - started > limit
        ]

    def _reservation_bytes(self, part: PartitionRun) -> int:
        meta, cfg = part.job.meta, self._pipeline.config
        return reservation_bytes(
            meta.partition_bytes, meta.wires, part.job.inputs[part.index], cfg.witness_memory_bytes
        )

    def _adapt(self, ready_before: int) -> None:
        """A synthesis just ended, and ``ready_before`` partitions were ready for the devices then: add or
        take away a slot on the evidence (after its partition is shown synthesized, so that no snapshot
        shows more synthesizing than the slots)."""
        pipeline, cfg = self._pipeline, self._pipeline.config
        if ready_before == 0 and pipeline.pending:
            self._starved, self._fed = self._starved + 1, 0
            if self._starved >= self._starved_limit and self.slots < cfg.synthesis_workers_max:
                self._resize(self.slots + 1)
        elif ready_before >= cfg.prefetch_partitions:
            self._starved, self._fed = 0, self._fed + 1
            if self._fed >= self._fed_limit and self.slots > cfg.synthesis_workers:
                self._resize(self.slots - 1)
        else:
            self._starved = self._fed = 0

    def _resize(self, slots: int) -> None:
        self.slots, self._starved, self._fed = slots, 0, 0
        self._pipeline.post(ev.SynthesisPoolSized(at=self._pipeline.clock(), max_concurrent=self.capacity()))

    def _headroom(self) -> int:
        """Bytes reservations leave free so a worker can always load a proving key it needs."""
        tables = counted_up_front(self._pipeline.config)
        return max((meta.worker_key_bytes(tables) for meta in self._pipeline.live_metas()), default=0)

    async def _synthesize(self, part: PartitionRun) -> None:
        pipeline, job = self._pipeline, part.job
        cfg = pipeline.config
        task = SynthesisTask(
            job.job_id, part.index, job.meta.key_path, job.inputs[part.index], cfg.synthesis_key_cache_bytes,
            witness_memory_bytes(job.meta.wires, cfg.witness_memory_bytes),
        )  # fmt: skip
        try:
            synthesized, ms = await self._backend.synthesize(
                synthesize_partition, task, limit=cfg.synthesis_timeout_secs
            )
        except PoolTimedOut as exc:
            self._failed(part, f"{exc} (synthesis_timeout_secs = {cfg.synthesis_timeout_secs:g})")
            return
        except PoolProcessDied as exc:
            pipeline.retry(part, str(exc), blame=not isinstance(exc, PoolReplaced))
            return
        except Exception as exc:
            self._failed(part, str(exc) or type(exc).__name__)
            return
        if not part.live:
            pipeline.release(part)
            return
        ready_before = len(pipeline.ready)
        pipeline.post(
            ev.SynthesisFinished(
                at=pipeline.clock(),
                job_id=job.job_id,
                partition=part.index,
                synth_ms=ms,
                attempt=part.attempt,
            )
        )
        part.move(P.SYNTHESIZED)
        part.synthesized = synthesized
        pipeline.ready.push(part.key, part)
        self._adapt(ready_before)

    def _failed(self, part: PartitionRun, reason: str) -> None:
        """The partition's synthesis failed for good: said, and its job failed naming it."""
        pipeline = self._pipeline
        pipeline.post(
            ev.SynthesisFailed(
                at=pipeline.clock(), job_id=part.job.job_id, partition=part.index, reason=reason,
                attempt=part.attempt,
            )
        )  # fmt: skip
        pipeline.fail_partition(part, f"synthesis failed: {reason}")


def _mark_running(job_id: str, journal: Store) -> None:
    journal.set_job_state(job_id, JobState.RUNNING)
