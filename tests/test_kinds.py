"""Proof kinds: cuzk's names, partition counts and priorities; memory estimates; the key cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prooflane.kinds import BUILTIN_KINDS, CIRCOM, CircuitMeta, kind_spec, prepare_builtin
from prooflane.models import Priority


def test_builtin_kinds_keep_cuzk_names_partitions_and_priorities() -> None:
    table = {k.name: (k.partitions, k.priority) for k in BUILTIN_KINDS}
    assert table == {
        "porep-c2": (10, Priority.NORMAL),
        "snap-update": (16, Priority.NORMAL),
        "window-post": (1, Priority.HIGH),
        "winning-post": (1, Priority.CRITICAL),
    }
    circom = kind_spec(CIRCOM)
    assert circom is not None and circom.partitions == 0
    assert kind_spec("porep-c1") is None


def test_priority_ranks_order_critical_first() -> None:
    assert sorted(Priority, key=lambda p: p.rank) == [Priority.CRITICAL, Priority.HIGH, Priority.NORMAL]


def test_memory_estimate_follows_the_documented_formula() -> None:
    meta = CircuitMeta("k", "/k.zkey", "bn128", 1000, 1200, 3, 1024, 5_000_000, {})
    assert meta.abc_bytes == 2 * 3 * 1024 * 32
    assert meta.partition_bytes == meta.abc_bytes + 2 * 1200 * 32 + 4 * 1024 * 32
    assert meta.key_alloc_bytes == 3 * 5_000_000
    assert CircuitMeta(**json.loads(json.dumps(meta.to_json()))) == meta


@pytest.mark.slow
def test_prepare_builtin_makes_the_key_once_and_reuses_it(tmp_path: Path) -> None:
    meta = prepare_builtin("winning-post", "tiny", "bn128", str(tmp_path))
    key = Path(meta.key_path)
    made = key.stat().st_mtime_ns
    again = prepare_builtin("winning-post", "tiny", "bn128", str(tmp_path))
    assert again == meta and key.stat().st_mtime_ns == made
    assert meta.curve == "bn128" and meta.constraints > 0 and meta.domain_size >= meta.constraints
    assert meta.vk["protocol"] == "groth16" and meta.key_nbytes > 0
