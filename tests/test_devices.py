"""Device workers: a prover process and a finalizer process behind pipes, and their deaths."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import pytest

from prooflane.circuits import Sector
from prooflane.devices import Device, RemoteError, Worker, exit_with, limit_native_threads, mp_context
from prooflane.errors import WorkerDied
from prooflane.kinds import StorageInput, SynthesisTask, prepare_builtin, synthesize_partition

pytestmark = [pytest.mark.slow, pytest.mark.anyio, pytest.mark.timeout(120)]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def worker() -> AsyncIterator[Worker]:
    io = ThreadPoolExecutor(8)
    made = Worker("cpu:0/w0", Device("cpu:0"), mp_context(), io)
    async with asyncio.timeout(60):
        await made.ready()
    yield made
    made.kill()
    io.shutdown(wait=False)


async def test_worker_proves_split_across_its_two_processes(worker: Worker, tmp_path: Path) -> None:
    meta = prepare_builtin("winning-post", "tiny", "bn128", str(tmp_path / "keys"))
    Sector.create(tmp_path / "sector", 256, seed=1)
    inputs = StorageInput("winning-post", "tiny", "bn128", str(tmp_path / "sector"), b"\x01" * 32)
    synthesized, _ = synthesize_partition(SynthesisTask("j", 0, meta.key_path, inputs))
    info = worker.info()
    assert info.prover_pid != info.finalizer_pid and os.getpid() not in (info.prover_pid, info.finalizer_pid)
    async with asyncio.timeout(60):
        await worker.stage(meta.key_path, synthesized)
        state, prove_ms = await worker.prove_start()
        assert "key" not in state and prove_ms > 0
        proof, public, verified, _ = await worker.finish(meta.key_path, state)
    assert verified and proof["protocol"] == "groth16" and len(public) == meta.public_signals


async def test_error_inside_a_process_is_a_remote_error_and_the_process_lives_on(worker: Worker) -> None:
    async with asyncio.timeout(60):
        with pytest.raises(RemoteError, match=r"nowhere\.zkey"):
            await worker.stage("/nowhere.zkey", None)
        with pytest.raises(RemoteError, match="unknown request"):
            await worker.prover.request("dance")
        await worker.ready()


async def test_killed_process_makes_the_worker_die_and_requests_fail(worker: Worker) -> None:
    died: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    def on_exit(reason: str) -> None:
        if not died.done():
            died.set_result(reason)

    worker.prover.watch(on_exit)
    pid = worker.prover.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    async with asyncio.timeout(60):
        reason = await died
        assert "killed by signal 9" in reason
        with pytest.raises(WorkerDied, match="prover"):
            await worker.prover.request("ping")


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
