"""Synthesized partitions in shared memory (``devices.parcel``): what is parked comes back equal and
writable in another process, without touching anyone else's copy; the daemon's claimed parcel unlinks its
file once it is gone, a copy never does; a folder that cannot hold it sends the buffers inline; and through
a real synthesis pool and worker a partition proves and verifies from its parcel, whose file is gone once
the partition is."""

from __future__ import annotations

import gc
import multiprocessing
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from prooflane.circuits import Sector
from prooflane.devices import ProcessBackend
from prooflane.devices.parcel import Parcel, opened, park
from prooflane.groth16 import Synthesized
from prooflane.kinds import StorageInput, SynthesisTask, prepare_builtin, synthesize_partition


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _arrays() -> list[np.ndarray[Any, Any]]:
    rng = np.random.default_rng(3)
    return [
        rng.integers(0, 2**63, size=(62_500, 4), dtype=np.uint64),  # a partition's vector
        np.asfortranarray(rng.integers(0, 9, size=(300, 70), dtype=np.int64)),
        np.arange(10, dtype=np.uint64),  # small: stays in the pickle
        np.zeros((0, 4), dtype=np.uint64),
    ]


def _open_and_scribble(parcel: Parcel) -> tuple[list[int], bool, bool]:
    arrays = parcel.open()
    sums = [int(a.sum()) for a in arrays]
    writable, aligned = all(a.flags.writeable for a in arrays), all(a.flags.aligned for a in arrays)
    arrays[0][0, 0] = 12345  # private to this process
    return sums, writable, aligned


def test_a_parked_value_opens_equal_writable_and_private_in_another_process(tmp_path: Path) -> None:
    arrays = _arrays()
    parcel = park(arrays, str(tmp_path))
    assert parcel.path is not None and parcel.problem == ""
    assert len(pickle.dumps(parcel)) < 4096  # what crosses a pipe: the pickle and the spans, no vectors
    with multiprocessing.get_context("forkserver").Pool(1) as pool:
        sums, writable, aligned = pool.apply(_open_and_scribble, (parcel,))
    assert sums == [int(a.sum()) for a in arrays] and writable and aligned
    mine = parcel.open()
    for got, want in zip(mine, arrays, strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want)
        assert got.flags.f_contiguous == want.flags.f_contiguous
    mine[0][0, 0] = 1
    assert parcel.open()[0][0, 0] == arrays[0][0, 0]  # another opening sees the file, unchanged


def test_the_claimed_parcel_unlinks_its_file_once_gone_and_a_copy_never_does(tmp_path: Path) -> None:
    parcel = park(_arrays(), str(tmp_path))
    path = Path(str(parcel.path))
    copy = pickle.loads(pickle.dumps(parcel))
    del copy
    gc.collect()
    assert path.exists()
    parcel.claim()
    opened_arrays = parcel.open()
    del parcel
    gc.collect()
    assert not path.exists()
    assert int(opened_arrays[0].sum()) == int(_arrays()[0].sum())  # a mapping keeps its pages


def test_a_folder_that_cannot_hold_it_sends_the_buffers_inline_saying_why(tmp_path: Path) -> None:
    arrays = _arrays()
    parcel = park(arrays, str(tmp_path / "gone"))
    assert parcel.path is None and "No such file" in parcel.problem
    assert parcel.nbytes >= arrays[0].nbytes
    back = pickle.loads(pickle.dumps(parcel)).open()
    assert all(np.array_equal(a, b) for a, b in zip(back, arrays, strict=True))
    parcel.claim()  # nothing to unlink


def test_opened_passes_anything_but_a_parcel_through(tmp_path: Path) -> None:
    value = {"a": 1}
    assert opened(value) is value
    assert opened(park(value, str(tmp_path))) == value


def _partition(tmp_path: Path) -> tuple[str, SynthesisTask]:
    meta = prepare_builtin("winning-post", "tiny", "bn128", str(tmp_path / "keys"))
    Sector.create(tmp_path / "sector", 256, seed=1)
    inputs = StorageInput("winning-post", "tiny", "bn128", str(tmp_path / "sector"), b"\x01" * 32)
    return meta.key_path, SynthesisTask("j", 0, meta.key_path, inputs)


def _exists(path: str | Path) -> bool:
    return Path(path).exists()


@pytest.mark.anyio
async def test_a_partition_proves_from_its_parcel_and_its_file_goes_with_it(tmp_path: Path) -> None:
    key_path, task = _partition(tmp_path)
    backend = ProcessBackend(pool_size=1, workers=1)
    await backend.start()
    folder = backend.parcels
    try:
        assert folder is not None and _exists(folder)
        parcel, _ms = await backend.synthesize(synthesize_partition, task)
        assert isinstance(parcel, Parcel) and parcel.path is not None
        assert isinstance(parcel.open(), Synthesized)
        path = Path(parcel.path)
        assert path.parent == Path(folder) and _exists(path)
        worker = backend.new_worker("cpu:0/w0", backend.device("cpu:0"))
        await worker.start()
        try:
            proved = await worker.prove(key_path, parcel, lambda: True, "ps-1/0")
            assert proved is not None
            finished = await worker.finish(key_path, proved[0], "ps-1/0")
        finally:
            worker.kill()
        assert finished.verified
        del parcel, proved
        gc.collect()
        assert not _exists(path)
    finally:
        await backend.stop()
    assert not _exists(folder)


@pytest.mark.anyio
async def test_a_backend_whose_folder_cannot_hold_parcels_logs_once_and_still_proves(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _, task = _partition(tmp_path)
    backend = ProcessBackend(pool_size=1, workers=1)
    await backend.start()
    real = backend.parcels
    backend.parcels = str(tmp_path / "full")  # as if /dev/shm refused the write
    try:
        for _ in range(2):
            parcel, _ms = await backend.synthesize(synthesize_partition, task)
            assert parcel.path is None and isinstance(parcel.open(), Synthesized)
    finally:
        backend.parcels = real
        await backend.stop()
    said = [r.getMessage() for r in caplog.records if "go through pipes" in r.getMessage()]
    assert len(said) == 1 and str(tmp_path / "full") in said[0]


@pytest.mark.anyio
async def test_a_backend_without_a_folder_for_parcels_says_so_at_start_and_still_proves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr("prooflane.devices.process.shared_folder", lambda: None)
    _, task = _partition(tmp_path)
    backend = ProcessBackend(pool_size=1, workers=1)
    await backend.start()
    try:
        synthesized, _ms = await backend.synthesize(synthesize_partition, task)
        assert isinstance(synthesized, Synthesized)  # through the pool's pipe, as before
    finally:
        await backend.stop()
    said = [r.getMessage() for r in caplog.records if "go through pipes" in r.getMessage()]
    assert said == ["synthesized partitions go through pipes: /dev/shm cannot hold a folder of them"]
