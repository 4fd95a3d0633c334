"""The engine on a ``cuda`` device with real processes (the process backend, its prover and finalizer
processes; numba's CUDA simulator where there is no GPU, ``NUMBA_ENABLE_CUDASIM=1`` inherited by the
worker processes): a circom job's proofs verify in snarkjs, a kill of the cuda worker's prover in the middle
of its device section replaces the worker and the partition is proven again, and a daemon told to use a
``cuda`` device where none can work refuses to start, in one line.

Sized for the simulator (docs/cuda.md): a chain of two squares, a few seconds per device section."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from prooflane.config import Config
from prooflane.engine.engine import Engine
from prooflane.groth16 import BN128, setup, write_wtns, write_zkey
from prooflane.models import JobRequest, JobState
from prooflane.states import WorkerState
from tests.support.daemons import snarkjs_verify
from tests.support.groth16_samples import square_chain

pytest.importorskip("numba.cuda", reason="numba-cuda is not installed: pip install 'prooflane[cuda]'")
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(600)]

WAIT = 300.0


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A .zkey of a chain of two squares (BN254) and two witnesses of it."""
    folder = tmp_path_factory.mktemp("cuda-chain")
    files = {"zkey": folder / "chain.zkey"}
    write_zkey(files["zkey"], setup(square_chain(BN128, 2)[0], seed=b"cuda-e2e"))
    for x in (3, 4):
        write_wtns(folder / f"w{x}.wtns", square_chain(BN128, 2, x=x)[1])
        files[f"w{x}"] = folder / f"w{x}.wtns"
    return files


def cuda_config(tmp_path: Path, keys_dir: Path, chain: dict[str, Path]) -> Config:
    return Config(
        data_dir=tmp_path / "data",
        keys_dir=keys_dir,
        allowed_roots=(chain["zkey"].parent,),
        devices=("cuda:0",),
        synthesis_workers=1,
        live_retention_secs=600.0,
    )


async def proving(engine: Engine, after: int) -> None:
    """Wait for a lease granted after event ``after`` (the worker's prover is then in the device section)."""
    async with asyncio.timeout(WAIT):
        async for item in engine.subscribe(after):
            if item.event == "lease_granted":
                break
    assert any(w.state is WorkerState.PROVING for w in engine.snapshot().workers)


async def test_a_circom_job_on_a_cuda_device_verifies_in_snarkjs_and_survives_a_kill_mid_section(
    tmp_path: Path, keys_dir: Path, chain: dict[str, Path], snarkjs: Path
) -> None:
    started = time.monotonic()
    async with Engine(cuda_config(tmp_path, keys_dir, chain)) as engine:
        await engine.register_circuit("chain", chain["zkey"])
        witnesses: list[str | dict[str, Any]] = [str(chain["w3"]), str(chain["w4"])]
        job = await engine.submit(JobRequest(kind="circom", circuit="chain", witnesses=witnesses))
        proof = await engine.wait_proof(job, WAIT)
        assert proof is not None and len(proof.partitions) == 2
        key = engine.verification_key("circom", "chain")
        for part in proof.partitions:
            said = snarkjs_verify(snarkjs, tmp_path / f"p{part.index}", key, part.proof, part.public)
            assert "OK!" in said, said
        first = time.monotonic() - started

        (worker,) = engine.workers()
        assert worker.device == "cuda:0" and worker.prover_pid is not None
        seq = engine.seq
        again = await engine.submit(JobRequest(kind="circom", circuit="chain", witnesses=witnesses[:1]))
        await proving(engine, seq)
        os.kill(worker.prover_pid, signal.SIGKILL)  # mid-section: the simulator takes seconds per section
        assert await engine.wait_proof(again, WAIT) is not None
        view = engine.job(again)
        assert view is not None and view.state is JobState.DONE and view.partitions[0].attempt == 2
        snapshot = engine.snapshot()
        (after,) = snapshot.workers
        assert after.restarts == 1 and snapshot.invariant_violations == ()
        (device,) = snapshot.devices
        assert device.memory is not None and device.memory.in_use_bytes == 0
        print(f"\ncuda e2e: first job (2 partitions) {first:.1f} s, all {time.monotonic() - started:.1f} s")


def test_a_daemon_told_to_use_a_cuda_device_that_cannot_work_refuses_in_one_line(tmp_path: Path) -> None:
    config = tmp_path / "prooflane.toml"
    config.write_text(f'devices = ["cuda:0"]\ndata_dir = "{tmp_path / "data"}"\n')
    env = os.environ | {"NUMBA_ENABLE_CUDASIM": "0", "CUDA_VISIBLE_DEVICES": ""}  # no GPU, no simulator
    done = subprocess.run(
        [str(Path(sys.executable).parent / "prooflane"), "serve", "--config", str(config), "--port", "0"],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    lines = [line for line in done.stderr.splitlines() if "cuda:0" in line]
    assert len(lines) == 1 and "device 'cuda:0' cannot work on this machine:" in lines[0], done.stderr
    assert "Traceback" not in done.stderr
