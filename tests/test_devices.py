"""The process backend's workers: a prover process and a finalizer process behind pipes, and their deaths."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from prooflane.circuits import Sector
from prooflane.devices import Device, ProcessBackend, RemoteError
from prooflane.devices._process import ProcessWorker, exit_with, limit_native_threads, mp_context
from prooflane.errors import WorkerDied
from prooflane.kinds import StorageInput, SynthesisTask, prepare_builtin, synthesize_partition

pytestmark = [pytest.mark.slow, pytest.mark.anyio, pytest.mark.timeout(120)]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def worker() -> AsyncIterator[ProcessWorker]:
    backend = ProcessBackend(pool_size=1, workers=1)
    made = backend.new_worker("cpu:0/w0", backend.device("cpu:0"))
    async with asyncio.timeout(60):
        await made.start()
    yield made
    made.kill()
    await backend.stop()


def _granted() -> bool:
    return True


async def test_worker_proves_split_across_its_two_processes(worker: ProcessWorker, tmp_path: Path) -> None:
    meta = prepare_builtin("winning-post", "tiny", "bn128", str(tmp_path / "keys"))
    Sector.create(tmp_path / "sector", 256, seed=1)
    inputs = StorageInput("winning-post", "tiny", "bn128", str(tmp_path / "sector"), b"\x01" * 32)
    synthesized, _ = synthesize_partition(SynthesisTask("j", 0, meta.key_path, inputs))
    info = worker.info()
    assert info.prover_pid != info.finalizer_pid and os.getpid() not in (info.prover_pid, info.finalizer_pid)
    async with asyncio.timeout(60):
        result = await worker.prove(meta.key_path, synthesized, _granted)
        assert result is not None
        state, prove_ms = result
        assert "key" not in state and prove_ms > 0
        finished = await worker.finish(meta.key_path, state)
    assert finished.verified and finished.proof["protocol"] == "groth16"
    assert len(finished.public) == meta.public_signals


async def test_a_partition_not_granted_never_enters_the_device_section(worker: ProcessWorker) -> None:
    async with asyncio.timeout(60):
        with pytest.raises(RemoteError, match=r"nowhere\.zkey"):
            await worker.prove("/nowhere.zkey", None, _granted)
    assert not worker.dead


async def test_error_inside_a_process_is_a_remote_error_and_the_process_lives_on(
    worker: ProcessWorker,
) -> None:
    async with asyncio.timeout(60):
        with pytest.raises(RemoteError, match="unknown request"):
            await worker.prover.request("dance")
        await worker.prover.ping()
    assert not worker.dead


async def test_killed_process_makes_the_worker_die_and_ends_its_other_process(worker: ProcessWorker) -> None:
    prover, finalizer = worker.prover.pid, worker.finalizer.pid
    assert prover is not None and finalizer is not None
    os.kill(prover, signal.SIGKILL)
    async with asyncio.timeout(60):
        reason = await worker.wait_dead()
        assert "prover" in reason
        with pytest.raises(WorkerDied):
            await worker.drop_key("/any.zkey")
        await _ended(finalizer)


async def test_workers_outlive_their_forkserver_and_new_ones_still_start(worker: ProcessWorker) -> None:
    from multiprocessing import forkserver

    server = forkserver._forkserver._forkserver_pid  # type: ignore[attr-defined]
    assert server is not None
    os.kill(server, signal.SIGKILL)
    async with asyncio.timeout(60):
        await _ended(server)
        await worker.prover.ping()  # the pair forked by the dead forkserver still answers
        assert not worker.dead
        backend = ProcessBackend(pool_size=1, workers=1)
        fresh = backend.new_worker("cpu:0/w1", Device("cpu:0"))
        await fresh.start()  # a new forkserver is started for it
        fresh.kill()
        await backend.stop()


async def _ended(pid: int) -> None:
    """Return once process ``pid`` has ended (its pidfd turns readable)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    loop, ended = asyncio.get_running_loop(), asyncio.Event()
    loop.add_reader(fd, ended.set)
    try:
        await ended.wait()
    finally:
        loop.remove_reader(fd)
        os.close(fd)


def test_worker_processes_get_one_rayon_thread_unless_set() -> None:
    environ: dict[str, str] = {}
    limit_native_threads(environ)
    assert environ == {"RAYON_NUM_THREADS": "1"}
    explicit = {"RAYON_NUM_THREADS": "2"}
    limit_native_threads(explicit)
    assert explicit == {"RAYON_NUM_THREADS": "2"}


def test_pool_processes_lower_their_priority_by_the_configured_niceness() -> None:
    own = os.getpriority(os.PRIO_PROCESS, 0)
    with ProcessPoolExecutor(
        1, mp_context=mp_context(), initializer=exit_with, initargs=(os.getpid(), 3)
    ) as pool:
        assert pool.submit(os.getpriority, os.PRIO_PROCESS, 0).result(timeout=120) - own == 3


async def test_worker_processes_are_named_for_their_role(worker: ProcessWorker) -> None:
    import psutil

    info = worker.info()
    assert info.prover_pid is not None and info.finalizer_pid is not None
    assert psutil.Process(info.prover_pid).name() == "prooflane-prove"
    assert psutil.Process(info.finalizer_pid).name() == "prooflane-final"


def _partition(tmp_path: Path, kind: str = "winning-post") -> tuple[str, SynthesisTask]:
    meta = prepare_builtin(kind, "tiny", "bn128", str(tmp_path / "keys"))
    if not (tmp_path / "sector").exists():
        Sector.create(tmp_path / "sector", 256, seed=1)
    inputs = StorageInput(kind, "tiny", "bn128", str(tmp_path / "sector"), b"\x01" * 32)
    return meta.key_path, SynthesisTask("j", 0, meta.key_path, inputs)


async def test_a_lease_is_granted_only_once_a_core_is_free(tmp_path: Path) -> None:
    key_path, task = _partition(tmp_path)
    backend = ProcessBackend(pool_size=1, workers=1, cores=1)
    await backend.start()
    made = backend.new_worker("cpu:0/w0", backend.device("cpu:0"))
    granted: list[int] = []

    def grant() -> bool:
        granted.append(backend.budget.running)
        return True

    try:
        async with asyncio.timeout(90):
            await made.start()
            synthesized, _ = await backend.run(synthesize_partition, task)
            async with backend.budget.slot():  # the only core is taken
                proving = asyncio.create_task(made.prove(key_path, synthesized, grant))
                for _ in range(5):
                    await asyncio.sleep(0)
                await made.prover.ping()  # answered after the staging: the worker now waits for a core
                for _ in range(5):
                    await asyncio.sleep(0)
                assert granted == [] and not proving.done()
            result = await proving
            assert result is not None and granted == [1]
            finished = await made.finish(key_path, result[0])
            assert finished.verified
    finally:
        made.kill()
        await backend.stop()


async def test_device_sections_finalizations_and_syntheses_share_the_core_budget(tmp_path: Path) -> None:
    key_path, task = _partition(tmp_path)
    backend = ProcessBackend(pool_size=2, workers=2, cores=1)
    await backend.start()
    workers = [backend.new_worker(f"cpu:{n}/w0", backend.device(f"cpu:{n}")) for n in range(2)]
    try:
        async with asyncio.timeout(120):
            await asyncio.gather(*(w.start() for w in workers))
            first, _ = await backend.run(synthesize_partition, task)
            assert backend.budget.steps == 1

            async def prove_and_finish(worker: ProcessWorker) -> bool:
                result = await worker.prove(key_path, first, _granted)
                assert result is not None
                return (await worker.finish(key_path, result[0])).verified

            outcomes = await asyncio.gather(
                *(prove_and_finish(w) for w in workers),
                backend.run(synthesize_partition, task),
                backend.run(synthesize_partition, task),
            )
        assert outcomes[0] is True and outcomes[1] is True
        # Two device sections, two finalizers' key loads, two finalizations, three syntheses: each held the
        # one slot, one at a time.
        assert backend.budget.steps == 9 and backend.budget.peak == 1 and backend.budget.running == 0
    finally:
        for worker in workers:
            worker.kill()
        await backend.stop()
