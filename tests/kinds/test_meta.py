"""A prepared circuit's description: the memory estimate, and the key cache of built-in kinds."""

from __future__ import annotations

import json

import pytest

from prooflane.groth16 import BN128
from prooflane.groth16.arithmetic import choose
from prooflane.kinds import CircuitMeta
from prooflane.kinds.meta import WORK_ELEMENTS
from tests.support.arithmetics import c_extension, libraries


def test_memory_estimate_follows_the_documented_formula(monkeypatch: pytest.MonkeyPatch) -> None:
    meta = CircuitMeta("k", "/k.zkey", "bn128", 1000, 1200, 3, 1024, 5_000_000, {})
    assert meta.abc_bytes == 2 * 3 * 1024 * 32
    assert meta.partition_bytes == meta.abc_bytes + 2 * 1200 * 32 + (4 + WORK_ELEMENTS) * 1024 * 32
    monkeypatch.setitem(choose._CHOSEN, "bn128", c_extension(BN128))
    assert meta.key_alloc_bytes == 5_000_000  # rows mapped from the file: no point objects
    monkeypatch.setitem(choose._CHOSEN, "bn128", libraries(BN128))
    assert meta.key_alloc_bytes == 3 * 5_000_000  # the rows and the point objects built from them
    assert CircuitMeta(**json.loads(json.dumps(meta.to_json()))) == meta


def test_a_worker_with_tables_reserves_them_beside_its_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """``msm_tables``: a worker's allocation is its key plus the tables of every base section (the C
    extension), each row ceil(windows / 2) times; the libraries build none."""
    from prooflane.groth16.arithmetic.base import table_shape

    meta = CircuitMeta("k", "/k.zkey", "bn128", 60_000, 61_000, 3, 65_536, 5_000_000, {})
    monkeypatch.setitem(choose._CHOSEN, "bn128", c_extension(BN128))
    window, stride, tables = table_shape(BN128, 65_536)
    assert (window, stride, tables) == (13, 2, 10)  # 20 windows of 13 bits for 254-bit scalars, 2 a table
    g1_rows = 2 * 61_000 + (61_000 - 4) + 65_536  # A, B1, C (no public wires or one), H
    expected = 64 * g1_rows * table_shape(BN128, 61_000)[2] + 128 * 61_000 * table_shape(BN128, 61_000)[2]
    assert meta.table_alloc_bytes == expected
    assert meta.worker_key_bytes(False) == meta.key_alloc_bytes == 5_000_000
    assert meta.worker_key_bytes(True) == 5_000_000 + meta.table_alloc_bytes
    monkeypatch.setitem(choose._CHOSEN, "bn128", libraries(BN128))
    assert meta.table_alloc_bytes == 0 and meta.worker_key_bytes(True) == meta.key_alloc_bytes
