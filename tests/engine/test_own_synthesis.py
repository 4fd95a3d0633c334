"""Workers that synthesize what they prove (a cpu worker of the process backend, here the in-process
backend's twin): the built-in kinds' partitions go to the first worker waiting, in the queue's order, each
run whole by one worker (synthesis, device section, finish) before it takes the next; the worker shows
synthesizing meanwhile; a cancel or a death while it synthesizes leaves nothing held; circom partitions still
go through the pool."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from prooflane.config import Config
from prooflane.devices import InProcessBackend, Step
from prooflane.states import JobState, PartitionState, WorkerState
from tests.support.engine import Gate, running

pytestmark = [pytest.mark.anyio, pytest.mark.engine, pytest.mark.timeout(120)]


def own(gate: Gate) -> InProcessBackend:
    return InProcessBackend(gate, own_synthesis=True)


def steps_of(backend: InProcessBackend, worker: str) -> list[tuple[str, str]]:
    return [(s.name, s.label) for s in backend.steps if s.worker_id == worker]


async def test_a_partition_runs_whole_on_one_worker_which_shows_synthesizing_meanwhile(
    engine_config: Callable[..., Config], sector: Path
) -> None:
    async with running(engine_config(), sector=sector, backend_of=own) as h:
        held = h.gate.hold(lambda s: s.name == "synthesize")
        job = await h.submit("porep-c2")
        await held.reached.wait()
        (worker,) = h.engine.snapshot().workers
        assert worker.state is WorkerState.SYNTHESIZING
        assert (worker.current_job, worker.current_partition, worker.current_token) == (job, 0, None)
        pipeline = h.engine.snapshot().pipelines[0]
        assert pipeline.partitions[0].state is PartitionState.SYNTHESIZING
        assert not [s for s in h.backend.steps if s.name == "run" and s.call == "synthesize_partition"]
        held.release.set()
        assert await h.done(job) is JobState.DONE
        ran = steps_of(h.backend, "cpu:0/w0")
        # each partition whole, one after the other: synthesize, stage, prove_start, finish
        for index in range(10):
            label = f"{job}/{index}"
            at = ran.index(("synthesize", label))
            assert ran[at : at + 4] == [("synthesize", label), ("stage", label), ("prove_start", label),
                                        ("finish", label)]  # fmt: skip
        await h.assert_clean()


async def test_a_cancel_while_a_worker_synthesizes_its_own_partition_leaves_nothing_held(
    engine_config: Callable[..., Config], sector: Path
) -> None:
    async with running(engine_config(), sector=sector, backend_of=own) as h:
        held = h.gate.hold(lambda s: s.name == "synthesize")
        job = await h.submit("snap-update")
        await held.reached.wait()
        assert await h.engine.cancel(job)
        held.release.set()
        await h.assert_clean()
        after = await h.submit("winning-post")  # the worker takes the next one
        assert await h.done(after) is JobState.DONE


async def test_a_worker_that_dies_as_it_synthesizes_its_own_partition_has_it_retried(
    engine_config: Callable[..., Config], sector: Path
) -> None:
    async with running(engine_config(), sector=sector, backend_of=own) as h:
        killed: list[Step] = []

        def kill(step: Step) -> None:
            killed.append(step)
            h.backend.kill(step.worker_id or "", "killed as it synthesized")

        h.gate.act(lambda s: s.name == "synthesize", kill)
        job = await h.submit("window-post")
        assert await h.done(job) is JobState.DONE
        assert len(killed) == 1
        view = h.engine.job(job)
        assert view is not None and view.partitions[0].attempt == 2
        await h.assert_clean()


async def test_a_failed_synthesis_of_its_own_fails_the_job_naming_it(
    engine_config: Callable[..., Config], sector: Path
) -> None:
    async with running(engine_config(), sector=sector, backend_of=own) as h:

        def broken(step: Step) -> None:
            raise ValueError("the sector's leaf 3 is not what its root says")

        h.gate.act(lambda s: s.name == "synthesize", broken)
        job = await h.submit("winning-post")
        assert await h.done(job) is JobState.FAILED
        view = h.engine.job(job)
        assert view is not None and view.error is not None
        assert "synthesis failed" in view.error and "leaf 3 is not what its root says" in view.error
        await h.assert_clean()


async def test_jobs_go_to_waiting_workers_in_the_queues_order(
    engine_config: Callable[..., Config], sector: Path
) -> None:
    """A critical job submitted last is the first synthesized once a worker is free."""
    async with running(engine_config(), sector=sector, backend_of=own) as h:
        held = h.gate.hold(lambda s: s.name == "synthesize")
        first = await h.submit("porep-c2")
        await held.reached.wait()
        normal = await h.submit("snap-update")
        critical = await h.submit("winning-post")
        held.release.set()
        for job in (first, normal, critical):
            assert await h.done(job) is JobState.DONE
        order = [s.label.split("/")[0] for s in h.backend.steps if s.name == "synthesize"]
        assert order.index(critical) < order.index(normal)
