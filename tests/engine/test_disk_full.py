"""A full disk under the journal: a real ENOSPC from a small tmpfs (the tests need to mount one: root).

The journal refuses the write whole (nothing half-stored); the engine refuses new jobs with 507 and says
why in its health, starts no partition, keeps every accepted job, and goes on by itself once there is room.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from prooflane.errors import StorageFull
from prooflane.groth16 import Proof, VerificationKey, verify
from prooflane.states import JobState
from prooflane.store import JournalUnwritable, Store
from tests.support.disk import fill
from tests.support.engine import WAIT, Harness, running, tiny_config

pytestmark = [pytest.mark.timeout(120)]


def test_a_write_to_a_full_disk_is_refused_whole_and_the_journal_goes_on_after(small_disk: Path) -> None:
    store = Store(small_disk / "journal.sqlite3")
    filler = fill(small_disk)
    with pytest.raises(JournalUnwritable, match=r"journal\.sqlite3 cannot be written"):
        store.insert_job(
            job_id="a", kind="porep-c2", priority="normal", request={}, randomness="00", partitions=10,
            submitted_at=0.0,
        )  # fmt: skip
    assert store.job("a") is None and store.partitions("a") == []
    with pytest.raises(JournalUnwritable):
        store.probe()
    filler.unlink()
    store.probe()
    store.insert_job(
        job_id="a", kind="porep-c2", priority="normal", request={}, randomness="00", partitions=10,
        submitted_at=0.0,
    )  # fmt: skip
    assert len(store.partitions("a")) == 10
    store.close()


@pytest.fixture
async def on_small_disk(small_disk: Path, keys_dir: Path) -> AsyncIterator[Harness]:
    """A started in-process engine whose data folder (journal, inline sectors) is on the small disk."""
    async with running(tiny_config(small_disk / "data", keys_dir)) as harness:
        yield harness


@pytest.mark.anyio
async def test_a_full_disk_refuses_jobs_with_507_and_resumes_without_losing_one(
    on_small_disk: Harness, small_disk: Path
) -> None:
    h = on_small_disk
    job_id = await h.submit("porep-c2")
    held = h.gate.hold(lambda s: s.name == "finish" and s.label == f"{job_id}/3")
    await held.reached.wait()
    feed = h.engine.subscribe(h.engine.snapshot().seq)
    filler = fill(small_disk)
    held.release.set()
    async with asyncio.timeout(WAIT):  # a proof that could not be stored: that partition is proven again
        async for item in feed:
            if item.event == "partition_retried" and "could not be journalled" in item.data:
                break
    health = h.engine.health()
    assert not health.ok
    assert any("cannot be written (database or disk is full)" in reason for reason in health.reasons)
    with pytest.raises(StorageFull) as refused:
        await h.submit("winning-post")
    assert "disk is full" in refused.value.detail
    assert h.state(job_id) is JobState.RUNNING
    assert h.engine.snapshot().invariant_violations == ()

    filler.unlink()  # room again: the engine goes on by itself
    assert await h.done(job_id) is JobState.DONE
    proofs = await h.engine.wait_proof(job_id, 0)
    assert proofs is not None and len(proofs.partitions) == 10
    vk = VerificationKey.from_json(h.engine.verification_key("porep-c2"))
    for part in proofs.partitions:
        public = tuple(int(x) for x in part.public)
        assert verify(vk, public, Proof.from_json(part.proof, public=public)), part.index
    assert h.engine.health().ok
    after = await h.submit("winning-post")
    assert await h.done(after) is JobState.DONE
    await h.assert_clean()


@pytest.mark.anyio
async def test_a_cancellation_asked_for_as_the_disk_fills_takes_effect_once_the_journal_takes_it(
    on_small_disk: Harness, small_disk: Path
) -> None:
    h = on_small_disk
    job_id = await h.submit("winning-post")
    held = h.gate.hold(lambda s: s.name == "finish")
    await held.reached.wait()
    filler = fill(small_disk)
    assert await h.engine.cancel(job_id)  # asked for: the journal refuses its end, which waits
    assert h.state(job_id) is JobState.RUNNING
    with pytest.raises(StorageFull):  # the journal is known to refuse writes now
        await h.engine.cancel(job_id)
    filler.unlink()
    held.release.set()
    assert await h.done(job_id) is JobState.CANCELLED  # the first end asked for is the one kept
    await h.assert_clean()


@pytest.mark.anyio
async def test_a_registration_on_a_full_disk_is_refused_as_storage_full_and_leaves_nothing(
    small_disk: Path, keys_dir: Path, circuit_files: tuple[Path, Path], shared_inputs: Path
) -> None:
    config = tiny_config(small_disk / "data", keys_dir, allowed_roots=(shared_inputs,))
    async with running(config) as h:
        filler = fill(small_disk)  # the journal can still take a row, but the key's copy cannot be made
        zkey, wasm = circuit_files
        with pytest.raises(StorageFull, match="disk is full"):
            await h.engine.register_circuit("chain", zkey, wasm_path=wasm)
        circuits = config.data_dir / "circuits"
        assert not circuits.exists() or list(circuits.iterdir()) == []
        filler.unlink()
        assert (await h.engine.register_circuit("chain", zkey, wasm_path=wasm)).name == "chain"


@pytest.mark.anyio
async def test_an_inline_sector_on_a_full_disk_is_refused_as_storage_full_and_leaves_nothing(
    on_small_disk: Harness, small_disk: Path
) -> None:
    h = on_small_disk
    filler = fill(small_disk)
    with pytest.raises(StorageFull, match="sector: "):
        await h.submit("winning-post", sector={"size": 256, "seed": "07"}, job_id="inline-full")
    sectors = small_disk / "data" / "sectors"
    assert not sectors.exists() or list(sectors.iterdir()) == []
    filler.unlink()
    job_id = await h.submit("winning-post", sector={"size": 256, "seed": "07"}, job_id="inline-full")
    assert await h.done(job_id) is JobState.DONE
    await h.assert_clean()
