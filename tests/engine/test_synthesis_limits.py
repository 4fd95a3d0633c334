"""A synthesis that never returns (a witness generator in a loop) cannot stop the engine: past
``synthesis_timeout_secs`` it is ended and its job fails naming the limit; while it runs long, other jobs
take its slot; where the backend cannot end it, health says so; and submissions are not progress."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from prooflane.config import Config
from prooflane.devices import InProcessBackend
from prooflane.states import JobState
from tests.support.clock import ManualClock
from tests.support.engine import running, synthesis_of

pytestmark = [pytest.mark.anyio, pytest.mark.engine, pytest.mark.timeout(120)]


class Unending(InProcessBackend):
    """A backend that cannot end a synthesis it runs (its ``limit`` is not kept)."""

    async def synthesize(self, call: Any, task: Any, *, limit: float | None = None) -> tuple[Any, float]:
        return await self.run(call, task)


async def test_a_synthesis_past_its_limit_fails_its_job_naming_the_limit_while_other_jobs_finish(
    engine_config: Callable[..., Config], sector: Path
) -> None:
    async with running(engine_config(synthesis_timeout_secs=1.0), sector=sector) as h:
        first: list[str] = []
        stuck = h.gate.hold(lambda s: (found := synthesis_of(s)) is not None and found[0] == first[0])
        first.append(await h.submit("winning-post"))
        await stuck.reached.wait()
        others = [await h.submit("window-post"), await h.submit("winning-post")]
        assert [await h.done(job) for job in others] == [JobState.DONE, JobState.DONE]
        assert await h.done(first[0]) is JobState.FAILED
        view = h.engine.job(first[0])
        assert view is not None and view.error == (
            "partition 0 failed: synthesis failed: it ran past its time limit of 1 s, and was ended "
            "(synthesis_timeout_secs = 1)"
        )
        await h.assert_clean()


async def test_a_long_synthesis_leaves_its_slot_to_other_jobs_but_not_to_its_own(
    engine_config: Callable[..., Config], sector: Path
) -> None:
    """One slot: a porep-c2 job's first synthesis runs long; a winning-post job behind it takes the slot,
    while the porep-c2 job's next partitions wait for their own."""
    clock = ManualClock()
    async with running(engine_config(), clock=clock, sector=sector) as h:
        first: list[str] = []
        stuck = h.gate.hold(lambda s: (found := synthesis_of(s)) is not None and found == (first[0], 0))
        porep = await h.submit("porep-c2")
        first.append(porep)
        await stuck.reached.wait()
        winning = h.engine.job(await h.submit("winning-post"))
        assert winning is not None
        await asyncio.sleep(0.1)
        assert h.synthesized() == [(porep, 0)]  # the slot is held: the queue's order
        clock.advance(10)  # the synthesis has run long
        h.engine._pipeline.kick.set()
        assert await h.done(winning.job_id) is JobState.DONE
        assert (porep, 1) not in h.synthesized()  # its own job waits for it
        stuck.release.set()
        assert await h.done(porep) is JobState.DONE


async def test_a_synthesis_the_backend_cannot_end_is_a_health_reason_until_it_ends(
    engine_config: Callable[..., Config], sector: Path
) -> None:
    clock = ManualClock()
    config = engine_config(synthesis_timeout_secs=30.0)
    async with running(config, clock=clock, sector=sector, backend_of=Unending) as h:
        stuck = h.gate.hold(lambda s: synthesis_of(s) is not None)
        job = await h.submit("winning-post")
        await stuck.reached.wait()
        clock.advance(30)
        assert h.engine.health().ok
        clock.advance(1)
        health = h.engine.health()
        assert not health.ok and health.reasons == (
            f"partition {job}/0 has been synthesizing for 31 s, past its limit (synthesis_timeout_secs = 30)",
        )
        assert await h.engine.cancel(job)
        await h.until(lambda: h.engine.health().ok)


async def test_submissions_while_a_synthesis_hangs_are_not_progress(
    engine_config: Callable[..., Config], sector: Path
) -> None:
    """A synthesis hangs, nine partitions wait behind it, and a job arrives every 2 s: the queue is still
    seen stalled once nothing has moved for ``stall_secs``."""
    clock = ManualClock()
    async with running(engine_config(stall_secs=8), clock=clock, sector=sector, backend_of=Unending) as h:
        stuck = h.gate.hold(lambda s: synthesis_of(s) is not None)
        await h.submit("porep-c2")
        await stuck.reached.wait()
        for _ in range(4):
            clock.advance(2)
            await h.submit("winning-post")
        clock.advance(1)
        health = h.engine.health()
        assert not health.ok and health.reasons[0].startswith("queue stalled: 13 partitions wait"), health
