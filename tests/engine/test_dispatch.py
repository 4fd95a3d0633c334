"""Synthesis slots that follow what the work costs (in-process engine, real proofs at ``tiny``): more
partitions synthesize at once while the devices wait on synthesis, up to ``synthesis_workers_max``, and
fewer again once the devices are the bottleneck; with ``synthesis_workers_max = synthesis_workers`` the
slots never move. The hook decides who waits for whom, so nothing here depends on speed."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from prooflane.circuits.sector import Sector
from prooflane.devices import InProcessBackend, Step
from prooflane.engine.engine import Engine
from prooflane.models import JobRequest
from prooflane.states import JobState, WorkerState
from tests.support.engine import WAIT, tiny_config

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


class Pace:
    """The backend's hook. ``starve``: a synthesis runs only once the devices have nothing to do (every
    worker idle, nothing ready), so each one ends with the devices waiting on it. ``feed``: a device section
    starts only once two partitions wait in the ready queue (or none is left to synthesize)."""

    def __init__(self) -> None:
        self.engine: Engine | None = None
        self.mode = "starve"
        self.slots_seen: list[int] = []

    async def __call__(self, step: Step) -> None:
        engine = self.engine
        if engine is None:
            return
        if self.mode == "starve" and step.call == "synthesize_partition":
            await self._until(engine, lambda: self._idle(engine))
        elif self.mode == "feed" and step.name == "prove_start":
            await self._until(engine, lambda: self._queued(engine))

    async def _until(self, engine: Engine, condition: Callable[[], bool]) -> None:
        """Wait until ``condition`` holds, looking again after each event (only events change it)."""
        feed = engine.subscribe(None)
        try:
            async with asyncio.timeout(WAIT):
                while not condition():
                    await anext(feed)
        finally:
            await feed.aclose()

    def _idle(self, engine: Engine) -> bool:
        snapshot = engine.snapshot()
        self.slots_seen.append(snapshot.synthesis.max_concurrent)
        idle = all(w.state is WorkerState.IDLE for w in snapshot.workers)
        return idle and snapshot.counters.device_queue_depth == 0

    def _queued(self, engine: Engine) -> bool:
        snapshot = engine.snapshot()
        self.slots_seen.append(snapshot.synthesis.max_concurrent)
        counters = snapshot.counters
        return counters.device_queue_depth >= 2 or counters.queue_depth + snapshot.synthesis.active == 0


@contextlib.asynccontextmanager
async def paced(tmp_path: Path, keys_dir: Path, **overrides: object) -> AsyncIterator[tuple[Engine, Pace]]:
    pace = Pace()
    config = tiny_config(tmp_path / "data", keys_dir, **overrides)
    Sector.create(config.data_dir / "sectors" / "s", 256, seed=7)  # named: a submit waits on nothing built
    async with Engine(config, backend=InProcessBackend(pace)) as engine:
        pace.engine = engine
        yield engine, pace


async def prove(engine: Engine, jobs: int) -> None:
    ids = [
        await engine.submit(JobRequest.model_validate({"kind": "winning-post", "sector": "s"}))
        for _ in range(jobs)
    ]
    for job_id in ids:
        await engine.wait_proof(job_id, WAIT)
        view = engine.job(job_id)
        assert view is not None and view.state is JobState.DONE, view


async def test_slots_grow_while_the_devices_wait_on_synthesis(tmp_path: Path, keys_dir: Path) -> None:
    async with paced(tmp_path, keys_dir, synthesis_workers_max=2) as (engine, pace):
        assert engine.snapshot().synthesis.max_concurrent == 1
        await prove(engine, 8)
        # One worker: filling it explains two syntheses in a row ending with nothing ready; the third grows.
        assert engine.snapshot().synthesis.max_concurrent == 2
        assert max(pace.slots_seen) == 2
        assert engine.snapshot().invariant_violations == ()


async def test_slots_shrink_again_once_the_devices_are_the_bottleneck(tmp_path: Path, keys_dir: Path) -> None:
    async with paced(tmp_path, keys_dir, synthesis_workers_max=2) as (engine, pace):
        await prove(engine, 6)
        assert engine.snapshot().synthesis.max_concurrent == 2
        pace.mode = "feed"
        await prove(engine, 12)
        assert engine.snapshot().synthesis.max_concurrent == 1
        assert engine.snapshot().invariant_violations == ()


async def test_slots_stay_put_when_the_most_is_the_least(tmp_path: Path, keys_dir: Path) -> None:
    async with paced(tmp_path, keys_dir, synthesis_workers_max=1) as (engine, pace):
        await prove(engine, 8)
        assert set(pace.slots_seen) == {1}
        assert engine.snapshot().synthesis.max_concurrent == 1
