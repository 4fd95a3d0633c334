"""The core budget of the process backend, and the slim keys its device processes hold (fast tests)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from prooflane.circuits import Sector
from prooflane.devices.cores import CoreBudget
from prooflane.devices.keys import drop_key, load_key
from prooflane.groth16 import prove_finish, prove_start, verify
from prooflane.kinds import StorageInput, SynthesisTask, prepare_builtin, synthesize_partition

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


async def test_no_more_steps_compute_at_once_than_the_budget_allows() -> None:
    budget = CoreBudget(2)
    release = asyncio.Event()
    inside: list[int] = []  # steps inside their slot, sampled as each one enters

    async def step() -> None:
        async with budget.slot():
            inside.append(budget.running)
            await release.wait()

    tasks = [asyncio.create_task(step()) for _ in range(7)]
    for _ in range(5):
        await asyncio.sleep(0)
    assert budget.running == 2 and len(inside) == 2  # five wait for a slot
    release.set()
    await asyncio.gather(*tasks)
    assert max(inside) <= 2 and budget.peak == 2 and budget.steps == 7 and budget.running == 0


async def test_slots_go_to_waiting_steps_in_arrival_order() -> None:
    budget = CoreBudget(1)
    gates = [asyncio.Event() for _ in range(4)]
    order: list[int] = []

    async def step(n: int) -> None:
        async with budget.slot():
            order.append(n)
            await gates[n].wait()

    tasks = [asyncio.create_task(step(n)) for n in range(4)]
    for n in range(4):
        for _ in range(3):
            await asyncio.sleep(0)
        assert order == list(range(n + 1)) and budget.running == 1
        gates[n].set()
    await asyncio.gather(*tasks)
    assert budget.peak == 1


async def test_a_step_that_fails_gives_its_slot_back() -> None:
    budget = CoreBudget(1)
    with pytest.raises(RuntimeError):
        async with budget.slot():
            raise RuntimeError("the step failed")
    async with asyncio.timeout(5), budget.slot():
        assert budget.running == 1
    assert budget.running == 0


async def test_a_budget_of_zero_counts_steps_without_limiting_them() -> None:
    budget, release = CoreBudget(0), asyncio.Event()

    async def step() -> None:
        async with budget.slot():
            await release.wait()

    tasks = [asyncio.create_task(step()) for _ in range(5)]
    await asyncio.sleep(0)
    assert budget.running == 5
    release.set()
    await asyncio.gather(*tasks)
    assert budget.peak == 5 and budget.running == 0


def test_a_device_process_key_has_no_matrices_and_still_proves(tmp_path: Path) -> None:
    meta = prepare_builtin("winning-post", "tiny", "bn128", str(tmp_path / "keys"))
    Sector.create(tmp_path / "sector", 256, seed=1)
    inputs = StorageInput("winning-post", "tiny", "bn128", str(tmp_path / "sector"), b"\x01" * 32)
    synthesized, _ = synthesize_partition(SynthesisTask("j", 0, meta.key_path, inputs))
    try:
        key = load_key(meta.key_path, ("a", "b1", "b2", "c", "h"), matrices=False)
        assert key.coefficients.row.size == 0 and key.coefficients.value.shape == (0, 4)
        proof = prove_finish(prove_start(key, synthesized))
        assert verify(key.verification_key, proof.public, proof)
    finally:
        drop_key(meta.key_path)
