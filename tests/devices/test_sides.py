"""A worker's two processes' sides, in this process: what loading a key builds, with and without tables."""

from __future__ import annotations

from pathlib import Path

import pytest

from prooflane.devices.in_child import FinalizerSide, ProverSide
from prooflane.devices.keys import loaded_key
from prooflane.groth16 import BN128, setup, write_zkey
from prooflane.groth16.prover import BASES, base_section, loaded
from tests.support.groth16_samples import square_chain


@pytest.mark.parametrize("tables", [False, True], ids=["plain", "tables"])
def test_each_side_loads_its_own_bases_with_tables_when_told(tmp_path: Path, tables: bool) -> None:
    write_zkey(tmp_path / "k.zkey", setup(square_chain(BN128, 40)[0], seed=b"sides"))
    path = str(tmp_path / "k.zkey")
    prover, finalizer = ProverSide(), FinalizerSide()
    prover.tables = finalizer.tables = tables
    prover.load(path)
    key = loaded_key(path)
    assert key is not None
    assert loaded(key, prover.bases) and not loaded(key, finalizer.bases)
    finalizer.load(path)
    for name in BASES:
        assert (base_section(key.curve, key.digest, name, None).tables is not None) == tables, name
    prover.drop(path)
    assert loaded_key(path) is None and not loaded(key, BASES)
