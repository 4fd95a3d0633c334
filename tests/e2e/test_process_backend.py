"""The process backend's workers: a prover process and a finalizer process behind pipes, and their deaths."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest

from prooflane.circuits import Sector
from prooflane.devices import Device, ProcessBackend, RemoteError
from prooflane.devices.child import ChildProcess
from prooflane.devices.in_child import below_this_process, exit_with, limit_native_threads
from prooflane.devices.pool import _result
from prooflane.devices.process import ProcessWorker, mp_context
from prooflane.devices.roles import Role
from prooflane.errors import WorkerDied
from prooflane.groth16.arithmetic import MAX_THREADS, cpu_threads
from prooflane.kinds import StorageInput, SynthesisTask, prepare_builtin, synthesize_partition

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def worker() -> AsyncIterator[ProcessWorker]:
    """A worker with a finalizer beside its prover (``split_prove``: a cuda device's layout)."""
    backend = ProcessBackend(pool_size=1, workers=1, split_prove=True)
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
        assert "prover" in reason and reason.endswith("exited: killed by signal 9"), reason
        with pytest.raises(WorkerDied):
            await worker.drop_key("/any.zkey")
        await _ended(finalizer)


async def test_a_worker_is_dead_from_the_moment_a_process_of_it_is_seen_to_end(
    worker: ProcessWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The death is reported once its reason is known, which waits for the exit status (up to a second,
    while the forkserver reports it: held here until released). Meanwhile the worker is dead already:
    health and the lease ask ``dead``, and a /healthz once said 200 in that window after a SIGKILL."""
    seen, released = asyncio.Event(), asyncio.Event()
    reason_soon = ChildProcess._exit_reason_soon

    async def held(self: ChildProcess, exc: BaseException) -> str:
        seen.set()  # the watch saw the process end and asks why
        await released.wait()
        return await reason_soon(self, exc)

    monkeypatch.setattr(ChildProcess, "_exit_reason_soon", held)
    assert worker.prover.pid is not None and not worker.dead
    os.kill(worker.prover.pid, signal.SIGKILL)
    async with asyncio.timeout(60):
        await seen.wait()
    assert worker.prover.exited and worker.death is None and worker.dead  # seen to end, not reported yet
    with pytest.raises(WorkerDied, match="a process of it ended"):
        worker.check_alive()
    released.set()
    async with asyncio.timeout(60):
        reason = await worker.wait_dead()
    assert reason.endswith("exited: killed by signal 9"), reason


async def test_a_sigkill_is_named_as_one_every_time_however_the_death_is_seen() -> None:
    """The pipe's end or the pidfd can be seen before the forkserver reports the exit status: a death once
    read "EOFError (its exit status was not known yet)" or "killed by signal 9" by chance. The report waits
    for the status, briefly: each of these deaths, seen by the watch or by the request in flight, names it."""
    backend = ProcessBackend(pool_size=1, workers=1)
    try:
        for attempt in range(6):
            made = backend.new_worker(f"cpu:0/w{attempt}", backend.device("cpu:0"))
            async with asyncio.timeout(60):
                await made.start()
                target = made.prover if attempt % 2 else made.finalizer
                assert target.pid is not None
                in_flight = asyncio.ensure_future(target.request("ping"))
                os.kill(target.pid, signal.SIGKILL)
                reason = await made.wait_dead()
                with contextlib.suppress(WorkerDied):
                    await in_flight
            assert reason.endswith("exited: killed by signal 9"), (attempt, reason)
            made.kill()
    finally:
        await backend.stop()


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
    assert environ == {"RAYON_NUM_THREADS": "1"}  # the C extension's threads keep their default
    explicit = {"RAYON_NUM_THREADS": "2", "PROOFLANE_THREADS": "3"}
    limit_native_threads(explicit)
    assert explicit == {"RAYON_NUM_THREADS": "2", "PROOFLANE_THREADS": "3"}


def test_the_extension_s_default_threads_follow_prooflane_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROOFLANE_THREADS", raising=False)
    every_core = cpu_threads()
    assert every_core == len(os.sched_getaffinity(0))
    monkeypatch.setenv("PROOFLANE_THREADS", "1")
    assert cpu_threads() == 1
    for ignored in ("0", "two", "", "-3"):  # not a count of threads: every core, as unset
        monkeypatch.setenv("PROOFLANE_THREADS", ignored)
        assert cpu_threads() == every_core
    monkeypatch.setenv("PROOFLANE_THREADS", str(2**70))  # read bounded: at most MAX_THREADS
    assert cpu_threads() == MAX_THREADS


def test_pool_processes_lower_their_priority_by_the_configured_niceness() -> None:
    own = os.getpriority(os.PRIO_PROCESS, 0)
    with ProcessPoolExecutor(
        1, mp_context=mp_context(), initializer=exit_with, initargs=(os.getpid(), 3)
    ) as pool:
        assert pool.submit(os.getpriority, os.PRIO_PROCESS, 0).result(timeout=120) - own == 3


def test_worker_niceness_is_counted_from_the_daemons_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """A daemon started with `nice -n 10` runs its workers 5 below itself, not at 5 (above itself)."""
    monkeypatch.setattr(os, "getpriority", lambda which, who: 10)
    assert below_this_process(5) == 15
    assert below_this_process(12) == 19  # the lowest priority there is
    monkeypatch.setattr(os, "getpriority", lambda which, who: -5)
    assert below_this_process(5) == 0


async def test_worker_processes_are_named_for_their_role(worker: ProcessWorker) -> None:
    import psutil

    info = worker.info()
    assert info.prover_pid is not None and info.finalizer_pid is not None
    assert psutil.Process(info.prover_pid).name() == Role.PROVER.value == "prooflane-prove"
    assert psutil.Process(info.finalizer_pid).name() == Role.FINALIZER.value == "prooflane-final"


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


async def test_a_finish_whose_early_g2_msm_was_for_another_partition_computes_its_own(
    tmp_path: Path,
) -> None:
    key_path, task = _partition(tmp_path)
    backend = ProcessBackend(pool_size=1, workers=1, split_prove=True)
    await backend.start()
    worker = backend.new_worker("cpu:0/w0", backend.device("cpu:0"))
    try:
        async with asyncio.timeout(120):
            await worker.start()
            synthesized, _ = await backend.run(synthesize_partition, task)
            proven = await worker.prove(key_path, synthesized, _granted, "job/0")
            assert proven is not None
            assert (await worker.finish(key_path, proven[0], "job/0")).verified  # the early MSM used
            proven = await worker.prove(key_path, synthesized, _granted, "job/1")
            assert proven is not None
            assert (await worker.finish(key_path, proven[0], "another/7")).verified  # computed anew
    finally:
        worker.kill()
        await backend.stop()


async def test_device_sections_finalizations_and_syntheses_share_the_core_budget(tmp_path: Path) -> None:
    key_path, task = _partition(tmp_path)
    backend = ProcessBackend(pool_size=2, workers=2, cores=1, split_prove=True)
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
        # Two device sections, two finalizers loading the key, the two G2 MSMs they computed beside the
        # device sections, two finalizations and three syntheses: each held the one slot, one at a time.
        assert backend.budget.steps == 11 and backend.budget.peak == 1 and backend.budget.running == 0
    finally:
        for worker in workers:
            worker.kill()
        await backend.stop()


async def test_a_cpu_worker_finishes_its_partitions_in_its_prover_with_no_finalizer(tmp_path: Path) -> None:
    """``split_prove = "auto"`` on a cpu device: one process, which proves and finishes; the core budget
    sees its device section and its finish, one at a time."""
    import psutil

    key_path, task = _partition(tmp_path)
    backend = ProcessBackend(pool_size=1, workers=1, cores=1)
    await backend.start()
    worker = backend.new_worker("cpu:0/w0", backend.device("cpu:0"))
    try:
        async with asyncio.timeout(120):
            await worker.start()
            assert worker.finishes_itself and worker.info().finalizer_pid is None
            names = [p.name() for p in psutil.Process().children(recursive=True)]
            assert Role.PROVER.value in names and Role.FINALIZER.value not in names
            synthesized, _ = await backend.run(synthesize_partition, task)
            proven = await worker.prove(key_path, synthesized, _granted, "job/0")
            assert proven is not None
            assert (await worker.finish(key_path, proven[0], "job/0")).verified
        assert backend.budget.steps == 3 and backend.budget.peak == 1  # synthesis, device section, finish
    finally:
        worker.kill()
        await backend.stop()


def _sleep(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def _die() -> None:
    os._exit(9)


async def test_a_pool_process_that_dies_is_a_broken_pool_and_a_cancelled_wait_cancels_its_request() -> None:
    pool = ProcessPoolExecutor(1, mp_context=mp_context())
    try:
        assert await _result(pool, asyncio.wrap_future(pool.submit(_sleep, 0.0))) == 0.0
        with pytest.raises(BrokenProcessPool):
            await _result(pool, asyncio.wrap_future(pool.submit(_die)))
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    pool = ProcessPoolExecutor(1, mp_context=mp_context())
    try:
        request = asyncio.wrap_future(pool.submit(_sleep, 30.0))
        waiting = asyncio.ensure_future(_result(pool, request))
        await asyncio.sleep(0.5)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert request.cancelled()
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


async def test_worker_processes_run_the_configured_threads_a_call() -> None:
    backend = ProcessBackend(pool_size=1, workers=1, threads=3)
    await backend.start()
    try:
        async with asyncio.timeout(120):
            assert await backend.run(cpu_threads) == 3  # exit_with set PROOFLANE_THREADS in the process
    finally:
        await backend.stop()
