"""The engine on the in-process backend: scheduling, budget, retries, cancellation, failure, restart.

Real Groth16 proofs at the ``tiny`` profile, a real journal, the real tracker; no processes, so every step
happens in a known order and a hook can hold, fail or kill any of them. Nothing waits on time.
"""

from __future__ import annotations

import asyncio
import errno
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from prooflane.circuits.sector import Sector
from prooflane.config import Config
from prooflane.devices import Device, InProcessBackend, PoolProcessDied, PoolReplaced, Step
from prooflane.devices.inprocess import InProcessWorker
from prooflane.engine.engine import Engine
from prooflane.errors import Conflict, Invalid, NotFound, TooLarge, Unavailable
from prooflane.groth16 import Proof, VerificationKey, verify
from prooflane.kinds import CircuitMeta
from prooflane.models import InlineSector, JobRequest
from prooflane.states import JobState, WorkerState
from tests.support.clock import ManualClock
from tests.support.engine import WAIT, Gate, Harness, Unstartable, is_synthesis, running, synthesis_of

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


# -- proofs ---------------------------------------------------------------------------------------------


async def test_a_job_is_proven_and_every_partition_verifies(h: Harness) -> None:
    job_id = await h.submit("porep-c2")
    proofs = await h.engine.wait_proof(job_id, WAIT)
    assert proofs is not None and len(proofs.partitions) == 10
    vk = VerificationKey.from_json(h.engine.verification_key("porep-c2"))
    for part in proofs.partitions:
        public = tuple(int(x) for x in part.public)
        assert verify(vk, public, Proof.from_json(part.proof, public=public)), part.index
    await h.assert_clean()


async def test_each_partition_is_synthesized_and_proven_once(h: Harness) -> None:
    job_id = await h.submit("porep-c2")
    await h.done(job_id)
    assert sorted(h.synthesized()) == [(job_id, i) for i in range(10)]
    proven = [s.label for s in h.backend.steps if s.name == "prove_start"]
    assert sorted(proven) == sorted(f"{job_id}/{i}" for i in range(10))


# -- scheduling -----------------------------------------------------------------------------------------


async def test_critical_before_high_before_normal(h: Harness) -> None:
    held = h.gate.hold(lambda s: synthesis_of(s) is not None)
    normal = await h.submit("porep-c2")
    await held.reached.wait()  # the first normal partition is in synthesis; the rest queue behind
    high = await h.submit("window-post")
    critical = await h.submit("winning-post")
    held.release.set()
    for job_id in (normal, high, critical):
        assert await h.done(job_id) is JobState.DONE
    order = [job for job, _ in h.synthesized()]
    assert order[:3] == [normal, critical, high]
    assert order[3:] == [normal] * 9


async def test_jobs_of_one_priority_run_in_arrival_order_and_partitions_in_index_order(h: Harness) -> None:
    held = h.gate.hold(lambda s: synthesis_of(s) is not None)
    first = await h.submit("snap-update")
    second = await h.submit("porep-c2")
    held.release.set()
    await h.done(first)
    await h.done(second)
    assert h.synthesized() == [(first, i) for i in range(16)] + [(second, i) for i in range(10)]


async def test_a_client_priority_overrides_the_kinds(h: Harness) -> None:
    held = h.gate.hold(lambda s: synthesis_of(s) is not None)
    blocker = await h.submit("porep-c2")
    await held.reached.wait()
    normal = await h.submit("winning-post", priority="normal")
    critical = await h.submit("porep-c2", priority="critical")
    held.release.set()
    for job_id in (blocker, normal, critical):
        await h.done(job_id)
    order = [job for job, _ in h.synthesized()]
    assert order.index(critical) < order.index(normal)
    assert order.index(critical) < order.index(blocker, 1)


# -- memory budget --------------------------------------------------------------------------------------


async def test_the_budget_admits_one_partition_at_a_time_when_only_one_fits(
    engine_config: Callable[..., Config], keys_dir: Path
) -> None:
    async with running(engine_config()):  # makes the keys, so their sizes can be read
        pass
    meta = CircuitMeta(**json.loads((keys_dir / "porep-c2-tiny-bn128.json").read_text()))
    # One partition's reservation and a loaded key fit; a second reservation with the key headroom never does.
    part, key = meta.partition_bytes, meta.key_alloc_bytes
    budget = part + key + min(part, key) // 2
    config = engine_config(memory_budget_bytes=budget, synthesis_workers=2, prefetch_partitions=4)
    async with running(config) as h:
        live: list[int] = []
        budget_now = h.engine.budget
        h.gate.act(lambda s: True, lambda s: live.append(budget_now.stats().live_reservations), 10**6)
        job_id = await h.submit("porep-c2")
        assert await h.done(job_id) is JobState.DONE
        assert max(live) == 1
        assert h.engine.budget.stats().peak_used_bytes <= budget
        await h.assert_clean()


async def test_every_reservation_is_returned_exactly(h: Harness) -> None:
    jobs = [await h.submit(kind) for kind in ("porep-c2", "snap-update", "window-post", "winning-post")]
    for job_id in jobs:
        assert await h.done(job_id) is JobState.DONE
    stats = h.engine.budget.stats()
    assert stats.reserved_bytes == 0 and stats.live_reservations == 0
    assert stats.peak_used_bytes > 0
    await h.assert_clean()


async def test_a_partition_larger_than_the_whole_budget_is_refused_with_413(
    engine_config: Callable[..., Config],
) -> None:
    async with running(engine_config(memory_budget_bytes=1 << 20)) as h:
        with pytest.raises(TooLarge) as refused:
            await h.submit("porep-c2")
        assert "memory_budget_bytes" in refused.value.detail
        assert h.engine.jobs() == []


# -- failures and retries -------------------------------------------------------------------------------


def _kill(h: Harness) -> Callable[[Step], None]:
    def kill(step: Step) -> None:
        assert step.worker_id is not None
        h.backend.kill(step.worker_id, "killed by the test")

    return kill


@pytest.mark.parametrize("stage", ["stage", "prove_start", "finish"])
async def test_a_worker_death_retries_what_it_held_and_a_new_worker_takes_over(
    h: Harness, stage: str
) -> None:
    h.gate.act(lambda s: s.name == stage, _kill(h))
    job_id = await h.submit("porep-c2")
    assert await h.done(job_id) is JobState.DONE
    view = h.engine.job(job_id)
    assert view is not None and view.partitions[0].attempt == 2
    snapshot = h.engine.snapshot()
    assert snapshot.counters.retries == sum(p.attempt - 1 for p in view.partitions) >= 1
    assert [w.worker_id for w in snapshot.workers] == ["cpu:0/w0"]
    await h.assert_clean()


async def test_a_dead_synthesis_process_is_retried(h: Harness) -> None:
    def die(step: Step) -> None:
        raise PoolProcessDied("a synthesis process died")

    h.gate.act(lambda s: synthesis_of(s) is not None, die)
    job_id = await h.submit("winning-post")
    assert await h.done(job_id) is JobState.DONE
    view = h.engine.job(job_id)
    assert view is not None and view.partitions[0].attempt == 2
    await h.assert_clean()


async def test_after_max_attempts_the_job_fails_naming_the_partition(
    engine_config: Callable[..., Config],
) -> None:
    async with running(engine_config(max_attempts=2)) as h:
        h.gate.act(lambda s: s.name == "prove_start", _kill(h), times=2)
        job_id = await h.submit("winning-post")
        assert await h.done(job_id) is JobState.FAILED
        view = h.engine.job(job_id)
        assert view is not None and view.error is not None
        assert view.error.startswith("partition 0 failed") and "failed 2 of max_attempts 2" in view.error
        with pytest.raises(Conflict, match="partition 0"):
            await h.engine.wait_proof(job_id, 0)
        await h.assert_clean()


async def test_a_worker_death_blames_only_the_partition_whose_work_ran_where_it_died(
    engine_config: Callable[..., Config],
) -> None:
    async with running(engine_config(max_attempts=1)) as h:
        job_id = await h.submit("porep-c2")
        finalizing = h.gate.hold(lambda s: s.name == "finish" and s.label == f"{job_id}/0")
        h.gate.act(lambda s: s.name == "prove_start" and s.label == f"{job_id}/1", _kill(h))
        assert await h.done(job_id) is JobState.FAILED
        assert finalizing.reached.is_set()  # partition 0 was on the same worker, finalizing: not to blame
        view = h.engine.job(job_id)
        assert view is not None and view.error is not None
        assert view.error.startswith("partition 1 failed: worker cpu:0/w0 died: killed by the test")
        finalizing.release.set()
        await h.assert_clean()


async def test_deaths_that_blame_no_partition_are_retried_beyond_max_attempts(
    engine_config: Callable[..., Config],
) -> None:
    async with running(engine_config(max_attempts=1)) as h:

        def idle_death(step: Step) -> None:  # a process of the worker died, but not while it ran this one
            assert step.worker_id is not None
            h.backend.kill(step.worker_id, "its finalizer died while idle", culprits=frozenset())

        def pool_replaced(step: Step) -> None:
            raise PoolReplaced("the synthesis pool was replaced: its forkserver ended")

        h.gate.act(lambda s: s.name == "prove_start", idle_death, times=3)
        h.gate.act(is_synthesis, pool_replaced, times=3)
        job_id = await h.submit("winning-post")
        assert await h.done(job_id) is JobState.DONE
        view = h.engine.job(job_id)
        assert view is not None and view.partitions[0].attempt == 7
        await h.assert_clean()


async def test_health_is_not_ok_from_the_moment_a_worker_died_until_it_is_replaced(h: Harness) -> None:
    seen: list[tuple[bool, tuple[str, ...], WorkerState]] = []

    def kill_and_look(step: Step) -> None:
        assert step.worker_id is not None
        h.backend.kill(step.worker_id, "killed by the test")
        # The supervisor has not run yet (nothing awaited since the death): health must already know, and
        # the snapshot of the same moment says the same (never "proving" beside "no live worker").
        (worker,) = h.engine.snapshot().workers
        seen.append((h.engine.health().ok, h.engine.health().reasons, worker.state))

    h.gate.act(lambda s: s.name == "prove_start", kill_and_look)
    job_id = await h.submit("winning-post")
    assert await h.done(job_id) is JobState.DONE
    [(ok, reasons, state)] = seen
    assert not ok and reasons == (
        "device cpu:0 has no live worker (cpu:0/w0 restarting: killed by the test)",
    )
    assert state is WorkerState.RESTARTING
    assert h.engine.health().ok
    await h.assert_clean()


async def test_a_failing_device_section_fails_the_job_and_names_the_partition(h: Harness) -> None:
    def broken(step: Step) -> None:
        raise ValueError("point at infinity in the MSM input")

    job_id = await h.submit("snap-update")
    label = f"{job_id}/5"
    h.gate.act(lambda s: s.name == "prove_start" and s.label == label, broken)
    assert await h.done(job_id) is JobState.FAILED
    status = h.engine.snapshot()
    failed = next(p for p in status.pipelines if p.job_id == job_id)
    assert failed.failed_partition == 5 and "point at infinity" in (failed.reason or "")
    assert status.counters.total_failed == 1
    await h.assert_clean()
    after = await h.submit("winning-post")  # the worker goes on with the next job
    assert await h.done(after) is JobState.DONE


# -- cancellation ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("stage", ["queued", "synthesis", "stage", "prove_start", "finish"])
async def test_cancel_at_any_stage_frees_everything_and_the_next_job_runs(h: Harness, stage: str) -> None:
    match: dict[str, Callable[[Step], bool]] = {
        "queued": lambda s: synthesis_of(s) is not None,
        "synthesis": lambda s: synthesis_of(s) is not None,
        "stage": lambda s: s.name == "stage",
        "prove_start": lambda s: s.name == "prove_start",
        "finish": lambda s: s.name == "finish",
    }
    held = h.gate.hold(match[stage])
    if stage == "queued":
        blocker = await h.submit("winning-post")
        await held.reached.wait()
        job_id = await h.submit("porep-c2")
        assert await h.engine.cancel(blocker)
    else:
        job_id = await h.submit("porep-c2")
        await held.reached.wait()
    assert await h.engine.cancel(job_id)
    assert not await h.engine.cancel(job_id)  # already finished: nothing to do
    held.release.set()
    assert h.state(job_id) is JobState.CANCELLED
    after = await h.submit("window-post")
    assert await h.done(after) is JobState.DONE
    await h.assert_clean()
    with pytest.raises(Conflict):
        await h.engine.wait_proof(job_id, 0)


# -- admission ------------------------------------------------------------------------------------------


async def test_resubmitting_a_job_id_is_idempotent_and_a_different_request_is_refused(h: Harness) -> None:
    first = await h.submit("winning-post", job_id="mine-1")
    again = await h.submit("winning-post", job_id="mine-1")
    assert first == again == "mine-1"
    assert len(h.engine.jobs()) == 1
    with pytest.raises(Conflict) as refused:
        await h.submit("window-post", job_id="mine-1")
    assert "different request" in refused.value.detail
    await h.done(first)
    assert [s for s in h.synthesized() if s[0] == "mine-1"] == [("mine-1", 0)]


async def test_an_unknown_kind_is_refused_with_the_known_ones(h: Harness) -> None:
    with pytest.raises(NotFound) as refused:
        await h.engine.submit(JobRequest(kind="porep-c3", sector="/nowhere"))
    assert refused.value.detail.startswith("unknown kind 'porep-c3': expected one of porep-c2,")


async def test_a_sector_of_the_wrong_size_is_refused_before_anything_is_journalled(h: Harness) -> None:
    with pytest.raises(Invalid) as refused:
        await h.engine.submit(JobRequest(kind="porep-c2", sector=InlineSector(size=512)))
    assert "256 bytes" in refused.value.detail
    assert h.engine.jobs() == []


async def test_an_inline_sector_of_a_terabyte_is_refused_before_anything_is_built(h: Harness) -> None:
    with pytest.raises(Invalid) as refused:
        await h.engine.submit(JobRequest(kind="porep-c2", sector=InlineSector(size=1 << 40), job_id="huge"))
    assert f"{1 << 40} bytes" in refused.value.detail
    assert not (h.engine.config.data_dir / "sectors" / "huge").exists()


# -- restart --------------------------------------------------------------------------------------------


async def test_a_restart_resumes_unfinished_jobs_without_proving_again(
    engine_config: Callable[..., Config],
) -> None:
    config = engine_config()
    async with running(config) as h:
        job_id = await h.submit("porep-c2")
        label = f"{job_id}/4"
        held = h.gate.hold(lambda s: s.name == "prove_start" and s.label == label)
        await held.reached.wait()
        view = h.engine.job(job_id)
        assert view is not None
        proven = {p.index for p in view.partitions if p.state.value == "done"}
    assert proven and max(proven) < 4
    async with running(config) as h:
        assert await h.done(job_id) is JobState.DONE
        again = {s.label for s in h.backend.steps if s.name == "prove_start"}
        again |= {f"{j}/{i}" for j, i in h.synthesized()}
        assert again.isdisjoint({f"{job_id}/{i}" for i in proven})
        assert {f"{job_id}/{i}" for i in range(10) if i not in proven} <= again
        proofs = await h.engine.wait_proof(job_id, 0)
        assert proofs is not None and len(proofs.partitions) == 10
        await h.assert_clean()


# -- the engine's own failures --------------------------------------------------------------------------


async def test_an_engine_that_cannot_go_on_stops_loudly_and_says_why(
    engine_config: Callable[..., Config], monkeypatch: pytest.MonkeyPatch
) -> None:
    async with Engine(engine_config(), backend=InProcessBackend()) as engine:
        failed = asyncio.create_task(engine.until_failed())

        def broken() -> None:  # a fault of the engine's own (a bug), not of a worker or a job
            raise RuntimeError("the dispatcher cannot go on")

        monkeypatch.setattr(engine._dispatcher, "_next", broken)
        await engine.submit(JobRequest.model_validate({"kind": "winning-post", "sector": {"size": 256}}))
        async with asyncio.timeout(WAIT):
            error = await failed
        assert "the dispatcher cannot go on" in str(error)
        assert engine.failure is error and not engine.ready
        with pytest.raises(Unavailable):
            await engine.submit(JobRequest.model_validate({"kind": "winning-post", "sector": {"size": 256}}))


async def test_a_worker_that_cannot_come_back_is_shown_lost_and_health_says_so(
    engine_config: Callable[..., Config],
) -> None:
    backend = Unstartable()
    async with Engine(engine_config(), backend=backend) as engine:
        assert engine.health().ok
        feed = engine.subscribe(engine.snapshot().seq)
        backend.kill("cpu:0/w0", "killed by the test")
        async with asyncio.timeout(WAIT):
            async for item in feed:
                if item.event == "worker_lost":
                    break
        snapshot = engine.snapshot()
        assert [(w.worker_id, w.state) for w in snapshot.workers] == [("cpu:0/w0", WorkerState.LOST)]
        health = engine.health()
        assert not health.ok and health.devices_down == ("cpu:0",)
        assert any("cpu:0" in reason for reason in health.reasons)
        assert snapshot.invariant_violations == ()


class _OutOfFiles(InProcessBackend):
    """After its first worker, making one fails as a process backend does without file descriptors left
    (EMFILE), and then starting one, until ``fixed``."""

    fixed = False
    made = 0

    def new_worker(self, worker_id: str, device: Device) -> InProcessWorker:
        self.made += 1
        if self.made == 2 and not self.fixed:
            raise OSError(errno.EMFILE, "Too many open files")
        worker = super().new_worker(worker_id, device)
        if self.made > 2 and not self.fixed:
            worker.start = self._fails  # type: ignore[method-assign]
        return worker

    async def _fails(self) -> None:
        raise OSError(errno.EMFILE, "Too many open files")


async def test_a_worker_that_cannot_be_made_or_started_is_a_worker_down_never_the_engines_end(
    engine_config: Callable[..., Config], sector: Path
) -> None:
    backend = _OutOfFiles()
    async with Engine(engine_config(), backend=backend) as engine:
        feed = engine.subscribe(engine.snapshot().seq)
        backend.kill("cpu:0/w0", "killed by the test")
        async with asyncio.timeout(WAIT):
            async for item in feed:
                if item.event == "worker_lost":
                    break
        assert engine.failure is None and engine.ready  # the engine goes on
        assert [(w.worker_id, w.state) for w in engine.snapshot().workers] == [("cpu:0/w0", WorkerState.LOST)]
        assert "Too many open files" in "; ".join(engine.health().reasons)
        backend.fixed = True  # descriptors are free again: the slot is filled, the job proven
        job_id = await engine.submit(JobRequest(kind="winning-post", sector=str(sector)))
        assert await engine.wait_proof(job_id, WAIT) is not None
        assert engine.health().ok


async def test_a_queue_that_does_not_move_while_workers_are_free_is_reported_stalled(
    engine_config: Callable[..., Config],
) -> None:
    now = [1000.0]
    gate = Gate()
    held = gate.hold(lambda s: synthesis_of(s) is not None)
    async with Engine(
        engine_config(stall_secs=60), backend=InProcessBackend(gate), clock=lambda: now[0]
    ) as engine:
        await engine.submit(JobRequest.model_validate({"kind": "porep-c2", "sector": {"size": 256}}))
        await held.reached.wait()  # synthesis hangs; nine partitions wait; the worker is free
        now[0] += 59
        assert engine.health().ok
        now[0] += 2
        health = engine.health()
        assert not health.ok and health.reasons[0].startswith("queue stalled: 9 partitions wait")
        assert engine.snapshot().health == health
        held.release.set()


# -- a worker that does not answer ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("step", "says"),
    [("stage", "has been staging"), ("prove_start", "device section"), ("finish", "finalization")],
)
async def test_a_worker_that_stops_answering_is_reported_whichever_step_it_is_in(
    engine_config: Callable[..., Config], sector: Path, step: str, says: str
) -> None:
    """Every worker busy and none answering (stopped, deadlocked): no event comes and no worker is free, so
    only a watchdog of the steps themselves can say so."""
    clock = ManualClock()
    async with running(engine_config(stall_secs=10), clock=clock, sector=sector) as h:
        held = h.gate.hold(lambda s: s.name == step)
        job_id = await h.submit("winning-post")
        await held.reached.wait()
        clock.advance(9)
        assert h.engine.health().ok
        clock.advance(2)  # 11 s in that step
        health = h.engine.health()
        assert not health.ok and any(says in r and "stall_secs" in r for r in health.reasons), health
        if step != "stage":  # in its lease: the tracker sees it, the worker's card says so
            (worker,) = h.engine.snapshot().workers
            assert worker.stuck is not None and says in worker.stuck
        held.release.set()
        assert await h.done(job_id) is JobState.DONE
        assert h.engine.health().ok


class _SlowToStart(InProcessBackend):
    """Its workers start only once told to (``go``)."""

    def __init__(self) -> None:
        super().__init__()
        self.starting, self.go = asyncio.Event(), asyncio.Event()

    def new_worker(self, worker_id: str, device: Device) -> InProcessWorker:
        worker = super().new_worker(worker_id, device)

        async def start() -> None:
            self.starting.set()
            await self.go.wait()

        worker.start = start  # type: ignore[method-assign]
        return worker


async def test_health_says_starting_while_the_engine_starts_and_stopping_once_it_stops(
    engine_config: Callable[..., Config],
) -> None:
    backend = _SlowToStart()
    engine = Engine(engine_config(), backend=backend)
    starting = asyncio.create_task(engine.start())
    await backend.starting.wait()  # its keys are made, its pipeline runs, its worker is starting
    assert "starting" in engine.health().reasons and "stopping" not in engine.health().reasons
    backend.go.set()
    await starting
    assert engine.health().ok
    stopping = asyncio.create_task(engine.stop())
    await asyncio.sleep(0)
    assert "stopping" in engine.health().reasons
    await stopping


async def test_an_inline_sector_left_by_a_daemon_killed_before_its_job_was_journalled_is_built_again(
    engine_config: Callable[..., Config],
) -> None:
    """A daemon killed between building a job's inline sector and journalling the job leaves the folder (the
    daemon's mark in it) or a half-built one: the same submission later is accepted (not a 409), a folder
    someone else put under that name still is refused, and the next start removes the leftovers."""
    config = engine_config()
    sectors = config.data_dir / "sectors"
    async with running(config) as h:
        first = await h.submit("winning-post", job_id="left")
        assert await h.done(first) is JobState.DONE
        assert (sectors / "left" / ".inline").exists()
        shutil.copytree(sectors / "left", sectors / "retried")  # as if killed before "retried" was journalled
        assert await h.done(await h.submit("winning-post", job_id="retried")) is JobState.DONE
        Sector.create(sectors / "theirs", 256, seed=9)  # someone's sector, no mark
        with pytest.raises(Conflict, match="holds a sector of that name"):
            await h.submit("winning-post", job_id="theirs")
        shutil.copytree(sectors / "left", sectors / "orphan")  # never submitted again
        shutil.copytree(sectors / "left", sectors / ".building-half.0a1b2c3d")
        await h.assert_clean()
    async with running(config) as h:
        assert sorted(p.name for p in sectors.iterdir()) == ["left", "retried", "theirs"]
        await h.assert_clean()
