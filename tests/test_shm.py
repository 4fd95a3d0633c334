"""The daemon's folders of parcels in shared memory (``prooflane.shm``): made per process, those of ended
processes swept and live ones kept, and their bytes counted per process."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import numpy as np

from prooflane.devices.parcel import park
from prooflane.shm import parked_bytes, shared_folder, sweep


def test_folders_of_ended_processes_are_swept_and_live_ones_kept(tmp_path: Path) -> None:
    process = multiprocessing.get_context("fork").Process(target=os._exit, args=(0,))
    process.start()
    process.join()
    dead = tmp_path / f"prooflane-parcels-{process.pid}-abc"
    dead.mkdir()
    (dead / "x.parcel").write_bytes(b"1" * 100)
    other = tmp_path / "somebody-else"
    other.mkdir()
    live = shared_folder(tmp_path)
    assert live is not None and Path(live).name.startswith(f"prooflane-parcels-{os.getpid()}-")
    assert not dead.exists() and other.exists()
    assert sweep(tmp_path) == []
    assert Path(live).exists()


def test_no_folder_for_parcels_where_the_root_is_missing(tmp_path: Path) -> None:
    assert shared_folder(tmp_path / "missing") is None


def test_parked_bytes_count_the_files_of_one_process_s_folders(tmp_path: Path) -> None:
    folder = shared_folder(tmp_path)
    assert folder is not None and parked_bytes(os.getpid(), tmp_path) == 0
    parcel = park([np.ones((62_500, 4), dtype=np.uint64)], folder)
    other = tmp_path / "prooflane-parcels-1-x"
    other.mkdir()
    (other / "y.parcel").write_bytes(b"1" * 1000)
    assert parcel.nbytes <= parked_bytes(os.getpid(), tmp_path) < parcel.nbytes + 4096
