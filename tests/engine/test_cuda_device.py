"""The engine on a ``cuda`` device, its device section on the GPU kernels (in numba's CUDA simulator where
there is no GPU), through the same pipeline as on ``cpu``: a circom job proves and verifies; the device's
memory is budgeted (its capacity, the key's resident bases, the device section's need while it runs,
released exactly); a CUDA error in a device section replaces the worker and retries the partition; a
partition that could never fit the device fails naming both sizes.

The simulator runs a field multiplication in about 0.3 ms, so the circuit is a chain of two squares (a
device section of a few seconds); a tiny built-in kind would take many minutes (docs/cuda.md)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from prooflane.config import Config
from prooflane.devices import DeviceFault, Step
from prooflane.devices.cuda import SIMULATED_DEVICE_BYTES
from prooflane.groth16 import BN128, read_zkey, setup, write_wtns, write_zkey
from prooflane.groth16.cuda import key_device_bytes, partition_device_bytes, simulated
from prooflane.models import JobRequest, JobState
from tests.support.engine import Harness, running
from tests.support.groth16_samples import square_chain

pytest.importorskip("numba.cuda", reason="numba-cuda is not installed: pip install 'prooflane[cuda]'")
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(zkey, wtns) of a chain of two squares (BN254)."""
    folder = tmp_path_factory.mktemp("chain")
    r1cs, witness = square_chain(BN128, 2)
    write_zkey(folder / "chain.zkey", setup(r1cs, seed=b"cuda-engine"))
    write_wtns(folder / "chain.wtns", witness)
    return folder / "chain.zkey", folder / "chain.wtns"


def cuda_config(
    engine_config: Callable[..., Config], chain: tuple[Path, Path], **overrides: object
) -> Config:
    return engine_config(devices=("cuda:0",), allowed_roots=(chain[0].parent,), **overrides)


async def submit(h: Harness, chain: tuple[Path, Path]) -> str:
    await h.engine.register_circuit("chain", chain[0])
    return await h.engine.submit(JobRequest(kind="circom", circuit="chain", witnesses=[str(chain[1])]))


def device_memory(h: Harness) -> tuple[int, int, int, int]:
    (device,) = h.engine.snapshot().devices
    assert device.device == "cuda:0" and device.kind == "cuda" and device.memory is not None
    m = device.memory
    return m.total_bytes, m.keys_bytes, m.keys, m.in_use_bytes


async def test_a_job_proves_on_a_cuda_device_with_its_memory_budgeted(
    engine_config: Callable[..., Config], chain: tuple[Path, Path]
) -> None:
    key = read_zkey(chain[0])
    async with running(cuda_config(engine_config, chain)) as h:
        section = h.gate.hold(lambda step: step.name == "prove_start")
        job = await submit(h, chain)
        await section.reached.wait()
        total = SIMULATED_DEVICE_BYTES if simulated() else device_memory(h)[0]
        # Admitted before the lease: the key's bases resident, the section's need in use.
        assert device_memory(h) == (total, key_device_bytes(key), 1, partition_device_bytes(key))
        section.release.set()
        assert await h.done(job) is JobState.DONE
        proof = await h.engine.wait_proof(job, 0)
        assert proof is not None and len(proof.partitions) == 1
        assert device_memory(h) == (total, key_device_bytes(key), 1, 0)  # released exactly
        assert [s.worker_id for s in h.backend.steps if s.name == "prove_start"] == ["cuda:0/w0"]
        await h.assert_clean()


async def test_a_cuda_error_in_a_device_section_replaces_the_worker_and_retries(
    engine_config: Callable[..., Config], chain: tuple[Path, Path]
) -> None:
    def lost(step: Step) -> None:
        raise DeviceFault("CUDA error: CudaAPIError: [700] an illegal memory access was encountered")

    async with running(cuda_config(engine_config, chain)) as h:
        h.gate.act(lambda step: step.name == "prove_start", lost)
        job = await submit(h, chain)
        assert await h.done(job) is JobState.DONE
        (worker,) = h.engine.snapshot().workers
        assert worker.restarts == 1 and worker.last_error is not None
        assert "device cuda:0 failed in the device section" in worker.last_error
        assert "illegal memory access" in worker.last_error
        view = h.engine.job(job)
        assert view is not None and view.partitions[0].attempt == 2
        assert device_memory(h)[2:] == (1, 0)  # the dead worker's bases left the budget; the new one's came
        await h.assert_clean()


async def test_a_partition_that_could_never_fit_the_device_fails_naming_both_sizes(
    engine_config: Callable[..., Config], chain: tuple[Path, Path]
) -> None:
    async with running(cuda_config(engine_config, chain, device_memory_bytes=1000)) as h:
        job = await submit(h, chain)
        assert await h.done(job) is JobState.FAILED
        view = h.engine.job(job)
        assert view is not None and view.error is not None
        assert "bytes of device memory" in view.error and "device cuda:0 has 1,000" in view.error
        assert not [s for s in h.backend.steps if s.name == "prove_start"]
        assert device_memory(h) == (1000, 0, 0, 0)
        await h.assert_clean()
