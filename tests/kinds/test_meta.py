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
