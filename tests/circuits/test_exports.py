"""The public API of prooflane.circuits is exactly what the engine and users are meant to use."""

from __future__ import annotations

import prooflane.circuits as circuits

EXPECTED = {
    "KINDS",
    "PROFILES",
    "Assignment",
    "Circuit",
    "CompiledCircuit",
    "ConstraintSystem",
    "LinearCombination",
    "MerkleTree",
    "PoseidonParams",
    "Profile",
    "Sector",
    "SectorRoots",
    "challenges",
    "compile_circuit",
    "merkle_root_gadget",
    "partition_inputs",
    "partition_public",
    "partition_synthesize",
    "partition_witness",
    "poseidon",
    "poseidon_gadget",
    "poseidon_many",
    "poseidon_params",
    "profile_by_name",
    "storage_circuit",
    "verify_path",
}


def test_exports_are_what_we_mean() -> None:
    assert set(circuits.__all__) == EXPECTED
    for name in EXPECTED:
        assert getattr(circuits, name) is not None


def test_kinds_and_profiles() -> None:
    assert circuits.KINDS == ("winning-post", "window-post", "porep-c2", "snap-update")
    assert list(circuits.PROFILES) == ["tiny", "small", "medium"]
    tiny = circuits.PROFILES["tiny"]
    assert (tiny.sector_bytes, tiny.leaf_count, tiny.depth) == (256, 8, 3)
