"""The storage-proof circuits: sizes, challenges, witnesses, refusals, and real proofs checked by snarkjs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from prooflane.circuits import (
    KINDS,
    PROFILES,
    MerkleTree,
    Sector,
    challenges,
    partition_public,
    partition_synthesize,
    partition_witness,
    storage_circuit,
)
from prooflane.errors import CircuitError, SectorError, UnsatisfiedConstraint
from prooflane.groth16 import (
    BN128,
)

TINY = PROFILES["tiny"]
RANDOMNESS = bytes(range(32))


@pytest.fixture
def sector(tmp_path: Path) -> Sector:
    return Sector.create(tmp_path / "sector", TINY.sector_bytes, seed="storage-tests")


def expected_constraints(kind: str, k: int, depth: int) -> int:
    path = 244 * depth + 1
    if kind in ("winning-post", "window-post"):
        return k * (depth + 1 + path)
    return k * (depth + 1 + 2 * path + 243 + 1)


@pytest.mark.parametrize("kind", KINDS)
def test_tiny_circuits_have_the_documented_size(kind: str) -> None:
    circuit = storage_circuit(kind, "tiny")
    assert circuit.n_constraints == expected_constraints(kind, TINY.challenges(kind), TINY.depth)
    assert circuit is storage_circuit(kind, TINY)  # compiled once per process


def test_public_signals_are_named() -> None:
    assert storage_circuit("window-post", "tiny").public_names == ["comm_r", "challenges"]
    assert storage_circuit("porep-c2", "tiny").public_names == [
        "comm_d",
        "comm_r",
        "replica_id",
        "challenges",
    ]
    assert storage_circuit("snap-update", "tiny").public_names == [
        "comm_d",
        "comm_r_update",
        "update_key",
        "challenges",
    ]


def test_challenges_are_deterministic_and_depend_on_every_seed_part() -> None:
    small = PROFILES["small"]
    base = challenges("window-post", small, 7, RANDOMNESS, 0)
    assert base == challenges("window-post", small, 7, RANDOMNESS, 0)
    assert len(base) == small.post_challenges and all(0 <= c < small.leaf_count for c in base)
    assert base != challenges("window-post", small, 7, RANDOMNESS, 1)
    assert base != challenges("window-post", small, 8, RANDOMNESS, 0)
    assert base != challenges("window-post", small, 7, b"other", 0)
    assert base != challenges("winning-post", small, 7, RANDOMNESS, 0)


@pytest.mark.parametrize("kind", KINDS)
def test_partition_witness_is_deterministic_and_satisfies_the_circuit(kind: str, sector: Sector) -> None:
    one = partition_witness(kind, "tiny", sector, RANDOMNESS, 2)
    two = partition_witness(kind, "tiny", Sector.open(sector.path), RANDOMNESS, 2)
    assert (one.values == two.values).all()
    circuit = storage_circuit(kind, "tiny")
    synthesized = circuit.synthesize(one)
    assert list(synthesized.public) == partition_public(kind, "tiny", sector, RANDOMNESS, 2)
    assert synthesized.public[-1] == challenges(kind, "tiny", sector.sector_id, RANDOMNESS, 2)[-1]
    direct = partition_synthesize(kind, "tiny", sector, RANDOMNESS, 2)
    assert all((getattr(direct, n) == getattr(synthesized, n)).all() for n in ("witness", "a", "b", "c"))


def test_sector_of_another_size_is_refused(tmp_path: Path) -> None:
    other = Sector.create(tmp_path / "big", 512, seed=1)
    with pytest.raises(SectorError, match="profile 'tiny' proves sectors of 256 bytes"):
        partition_witness("porep-c2", "tiny", other, RANDOMNESS, 0)


def test_unknown_kind_and_profile_are_refused(sector: Sector) -> None:
    with pytest.raises(CircuitError, match="unknown proof kind"):
        storage_circuit("circom", "tiny")
    with pytest.raises(CircuitError, match="unknown profile"):
        storage_circuit("porep-c2", "huge")


def _rewrite_tree(sector: Sector, which: str, leaves: list[int]) -> None:
    """Replace a tree (and its root in meta.json) as a dishonest prover would."""
    tree = MerkleTree.build(leaves)
    (sector.path / f"tree-bn128-{which}.bin").write_bytes(tree.to_bytes())
    meta_path = sector.path / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["roots"]["bn128"]["comm_r" if which == "r" else "comm_r_update"] = str(tree.root)
    meta_path.write_text(json.dumps(meta))


@pytest.mark.parametrize("kind", ["porep-c2", "snap-update"])
def test_wrong_encoding_cannot_be_proven(kind: str, sector: Sector) -> None:
    which = "r" if kind == "porep-c2" else "u"
    honest = [sector.tree(which).leaf(i) for i in range(sector.leaf_count)]
    _rewrite_tree(sector, which, [(x + 1) % BN128.r for x in honest])
    with pytest.raises(UnsatisfiedConstraint) as caught:
        partition_witness(kind, "tiny", Sector.open(sector.path), RANDOMNESS, 0)
    assert caught.value.name == "challenge[0]/encoding"
    assert storage_circuit(kind, "tiny").constraint_names[caught.value.index] == caught.value.name


def test_data_changed_after_commitment_cannot_be_proven(sector: Sector) -> None:
    data = np.fromfile(sector.path / "data.bin", dtype=np.uint8)
    data[: TINY.sector_bytes : 32] ^= 1  # change the low byte of every leaf
    data.tofile(sector.path / "data.bin")
    with pytest.raises(UnsatisfiedConstraint) as caught:
        partition_witness("porep-c2", "tiny", Sector.open(sector.path), RANDOMNESS, 0)
    assert caught.value.name == "challenge[0]/data_root"


def test_replica_leaf_not_in_the_tree_cannot_be_proven(sector: Sector) -> None:
    raw = bytearray((sector.path / "tree-bn128-r.bin").read_bytes())
    for leaf in range(sector.leaf_count):  # every stored replica leaf, not the tree above it
        raw[32 * leaf] ^= 1
    (sector.path / "tree-bn128-r.bin").write_bytes(bytes(raw))
    with pytest.raises(UnsatisfiedConstraint) as caught:
        partition_witness("window-post", "tiny", Sector.open(sector.path), RANDOMNESS, 0)
    assert caught.value.name == "challenge[0]/replica_root"
