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
"""

from __future__ import annotations

import asyncio
import functools

from .. import events as ev
from ..devices.backend import DeviceBackend, PoolProcessDied, PoolReplaced
from ..kinds import SynthesisTask, synthesize_partition
from ..states import JobState, PartitionState
from ..store import Store
from .pipeline import Pipeline
from .records import PartitionRun
from .tables import counted_up_front

__all__ = ["Dispatcher"]

P = PartitionState


class Dispatcher:
    """Moves partitions from pending to synthesizing to ready, within the budget and the pool's size."""

    def __init__(self, pipeline: Pipeline, backend: DeviceBackend) -> None:
        self._pipeline = pipeline
        self._backend = backend
        self.active = 0  # synthesis tasks running; invariant: == partitions in state synthesizing
        cfg = pipeline.config
        self.slots = cfg.synthesis_workers  # invariant: synthesis_workers <= slots <= synthesis_workers_max
        workers = len(cfg.devices) * cfg.workers_per_device
        # Syntheses in a row that ended with nothing ready while partitions pended. Filling W idle workers
        # ends W + 1 of them so (each taken at once, then one more before the first device section ends),
        # however fast synthesis is: growing needs one more.
        self._starved, self._starved_limit = 0, workers + 2
        self._fed, self._fed_limit = 0, 4 * workers  # in a row that ended with the ready queue full

    async def run(self) -> None:
        """Take partitions in scheduler order, reserve memory for each (atomically), start its synthesis."""
        pipeline = self._pipeline
        while True:
            pipeline.kick.clear()
            while self._can_synthesize() and (head := pipeline.pending.peek()) is not None:
                _, part = head
                reservation = pipeline.budget.try_reserve(
                    f"{part.name}#{part.attempt}", part.job.meta.partition_bytes, headroom=self._headroom()
                )
                if reservation is None:
                    break  # the oldest highest-priority partition waits; nothing overtakes it
                pipeline.pending.pop()
                part.reservation = reservation
                part.move(P.SYNTHESIZING)
                if part.job.state is JobState.QUEUED:  # running from its first synthesis, as the tracker says
                    part.job.move(JobState.RUNNING)
                    pipeline.write(functools.partial(_mark_running, part.job.job_id))
                self.active += 1
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
        part.task = None
        if task.cancelled():
            self._pipeline.release(part)
        self._pipeline.kick.set()

    def _can_synthesize(self) -> bool:
        cfg = self._pipeline.config
        return (
            self._pipeline.journal_problem is None  # a proof made now could not be stored
            and self.active < self.slots
            and self.active + len(self._pipeline.ready) < cfg.prefetch_partitions + self.slots
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
        self._pipeline.post(ev.SynthesisPoolSized(at=self._pipeline.clock(), max_concurrent=slots))

    def _headroom(self) -> int:
        """Bytes reservations leave free so a worker can always load a proving key it needs."""
        jobs, tables = self._pipeline.jobs.values(), counted_up_front(self._pipeline.config)
        return max((j.meta.worker_key_bytes(tables) for j in jobs if not j.state.terminal), default=0)

    async def _synthesize(self, part: PartitionRun) -> None:
        pipeline, job = self._pipeline, part.job
        task = SynthesisTask(
            job.job_id, part.index, job.meta.key_path, job.inputs[part.index],
            pipeline.config.synthesis_key_cache_bytes,
        )  # fmt: skip
        try:
            synthesized, ms = await self._backend.synthesize(synthesize_partition, task)
        except PoolProcessDied as exc:
            pipeline.retry(part, str(exc), blame=not isinstance(exc, PoolReplaced))
            return
        except Exception as exc:
            reason = str(exc) or type(exc).__name__
            pipeline.post(
                ev.SynthesisFailed(
                    at=pipeline.clock(), job_id=job.job_id, partition=part.index, reason=reason,
                    attempt=part.attempt,
                )
            )  # fmt: skip
            pipeline.fail_partition(part, f"synthesis failed: {reason}")
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


def _mark_running(job_id: str, journal: Store) -> None:
    journal.set_job_state(job_id, JobState.RUNNING)
