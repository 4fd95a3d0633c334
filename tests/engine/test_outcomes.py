"""A partition's outcome is one decision, which the journal and the live view both learn from.

Each test sets up one interleaving of a worker's death, a cancel, a retry or a restart with a finalizer's
answer, on the in-process backend (every step in a known order), and checks that the journal and the live
view (``/status``) end up saying the same of every job, with nothing left waiting.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from prooflane.config import Config
from prooflane.devices.inprocess import InProcessWorker
from prooflane.engine.pipeline import Pipeline
from prooflane.states import JobState, PartitionState, WorkerState
from tests.support.engine import AnsweringBackend, Harness, running

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

P = PartitionState


def proving_with_finalizing(h: Harness) -> bool:
    """The moment of the issue: the worker proves one partition while its finalizer finishes another."""
    (worker,) = h.engine.snapshot().workers
    return worker.state is WorkerState.PROVING and bool(worker.finalizing)


async def settled(h: Harness, *job_ids: str) -> None:
    """Every job ended and every worker back, idle."""
    for job_id in job_ids:
        await h.done(job_id)
    await h.until(lambda: {w.state for w in h.engine.snapshot().workers} == {WorkerState.IDLE})


def assert_agrees(h: Harness) -> None:
    snapshot = h.engine.snapshot()
    assert h.against_journal() == []
    assert snapshot.counters.queue_depth == 0
    assert snapshot.invariant_violations == ()
    assert snapshot.illegal_events == 0


async def test_a_finalizer_answer_that_arrives_as_its_worker_dies_is_decided_once(
    engine_config: Callable[..., Config],
) -> None:
    """The issue's interleaving: the prover is killed while the worker proves ``b/0`` and finalizes
    ``a/0``; the finalizer's answer for ``a/0`` is already made and reaches the engine after the death is
    known. The death decides first (``a/0`` is retried), so that answer is discarded: both jobs are done,
    each once, in the journal and the live view alike."""
    async with running(engine_config(), backend_of=AnsweringBackend) as h:
        backend = h.backend
        assert isinstance(backend, AnsweringBackend)
        finishing = h.gate.hold(lambda s: s.name == "finish" and s.label == "a/0")
        proving = h.gate.hold(lambda s: s.name == "prove_start" and s.label == "b/0")

        killed: list[str] = []

        async def die_answering(worker: InProcessWorker, label: str) -> None:
            if label == "a/0" and not killed:  # once: a/0's next attempt is answered as usual
                killed.append(worker.worker_id)
                assert proving_with_finalizing(h)
                backend.kill(worker.worker_id, "prover exited: killed by signal 9", frozenset({"b/0"}))

        backend.on_answer = die_answering
        await h.submit("winning-post", job_id="a")
        await h.submit("winning-post", job_id="b")
        await proving.reached.wait()
        finishing.release.set()
        proving.release.set()
        await settled(h, "a", "b")
        assert h.state("a") is JobState.DONE and h.state("b") is JobState.DONE
        (a,) = h.engine.snapshot().pipelines[0].partitions
        assert (a.state, a.attempt) == (P.DONE, 2)  # proven again after the death: the late answer lost
        assert_agrees(h)
        await h.assert_clean()


async def test_a_result_accepted_before_the_death_is_never_queued_again(
    engine_config: Callable[..., Config],
) -> None:
    """The other order: ``a/0``'s answer is taken (journalled, done) and only then is the prover killed
    while it proves ``b/0``: ``a`` stays done (the death's retry takes ``b/0`` alone)."""
    async with running(engine_config(), backend_of=AnsweringBackend) as h:
        finishing = h.gate.hold(lambda s: s.name == "finish" and s.label == "a/0")
        proving = h.gate.hold(lambda s: s.name == "prove_start" and s.label == "b/0")
        await h.submit("winning-post", job_id="a")
        await h.submit("winning-post", job_id="b")
        await proving.reached.wait()
        finishing.release.set()
        assert await h.done("a") is JobState.DONE
        h.backend.kill("cpu:0/w0", "prover exited: killed by signal 9", frozenset({"b/0"}))
        proving.release.set()
        await settled(h, "b")
        pipelines = h.engine.snapshot().pipelines
        assert [(p.job_id, p.state, p.partitions[0].attempt) for p in pipelines] == [
            ("a", JobState.DONE, 1),
            ("b", JobState.DONE, 2),
        ]
        assert_agrees(h)
        await h.assert_clean()


async def test_a_late_answer_for_a_partition_already_given_to_another_attempt_is_discarded(
    engine_config: Callable[..., Config],
) -> None:
    """The dead worker's answer for ``a/0`` arrives only once ``a/0``'s next attempt holds a lease on the
    new worker: first decided wins (the death's retry), so it changes nothing, and the new attempt's
    worker is not cleared by it."""
    async with running(engine_config(), backend_of=AnsweringBackend) as h:
        backend = h.backend
        assert isinstance(backend, AnsweringBackend)
        again = h.gate.hold(lambda s: s.name == "prove_start" and s.label == "a/0" and bool(finished))
        late = asyncio.Event()
        finished: list[str] = []

        async def die_then_answer_late(worker: InProcessWorker, label: str) -> None:
            if label == "a/0" and not finished:
                finished.append(label)
                backend.kill(worker.worker_id, "prover exited: killed by signal 9", frozenset())
                await late.wait()  # the answer is still on its way while a/0 runs again

        backend.on_answer = die_then_answer_late
        await h.submit("winning-post", job_id="a")
        await again.reached.wait()
        (worker,) = h.engine.snapshot().workers
        assert worker.state is WorkerState.PROVING
        late.set()
        for _ in range(10):
            await asyncio.sleep(0)
        (worker,) = h.engine.snapshot().workers
        assert worker.state is WorkerState.PROVING  # the late answer cleared nothing of the new lease
        (a,) = h.engine.snapshot().pipelines[0].partitions
        assert (a.state, a.attempt) == (P.PROVING, 2)
        assert h.against_journal() == []
        again.release.set()
        await settled(h, "a")
        assert h.state("a") is JobState.DONE
        assert_agrees(h)
        await h.assert_clean()


async def test_a_cancel_as_the_finalizer_answers_wins_over_the_answer(
    engine_config: Callable[..., Config],
) -> None:
    """The job is cancelled while its last partition's answer is on its way: the answer is discarded,
    and the journal and the live view both say cancelled, the partition too."""
    async with running(engine_config(), backend_of=AnsweringBackend) as h:
        backend = h.backend
        assert isinstance(backend, AnsweringBackend)

        async def cancel_answering(worker: InProcessWorker, label: str) -> None:
            if label == "a/0":
                assert await h.engine.cancel("a")

        backend.on_answer = cancel_answering
        await h.submit("winning-post", job_id="a")
        await settled(h, "a")
        assert h.state("a") is JobState.CANCELLED
        (a,) = h.engine.snapshot().pipelines[0].partitions
        assert a.state is P.CANCELLED
        assert_agrees(h)
        await h.assert_clean()


async def test_a_cancel_after_some_partitions_are_done_keeps_them_done_in_both(
    engine_config: Callable[..., Config],
) -> None:
    async with running(engine_config()) as h:
        held = h.gate.hold(lambda s: s.name == "finish" and s.label == "a/2")
        await h.submit("porep-c2", job_id="a")
        await held.reached.wait()
        assert await h.engine.cancel("a")
        held.release.set()
        await settled(h, "a")
        states = [p.state for p in h.engine.snapshot().pipelines[0].partitions]
        assert states[:2] == [P.DONE, P.DONE] and set(states[2:]) == {P.CANCELLED}
        assert_agrees(h)
        await h.assert_clean()


async def test_a_restart_after_the_last_proof_was_written_ends_the_job_done_without_proving_again(
    engine_config: Callable[..., Config], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon was killed between writing a job's last proof and writing its end: at the next start the
    job is resumed fully proven and ends done at once, in the journal and the live view."""
    config = engine_config()
    with monkeypatch.context() as patch:
        patch.setattr(Pipeline, "end_job", lambda *args, **kwargs: None)  # killed before the end is written
        async with running(config) as h:
            await h.submit("winning-post", job_id="a")
            await h.until(lambda: h.engine.snapshot().pipelines[0].partitions[0].state is P.DONE)
    async with running(config) as h:
        assert await h.done("a") is JobState.DONE
        assert [s for s in h.backend.steps if s.name in ("stage", "prove_start", "finish")] == []
        assert h.synthesized() == []
        assert_agrees(h)
        await h.assert_clean()
