"""Poseidon Merkle trees: native paths and the inclusion gadget."""

from __future__ import annotations

import pytest

from prooflane.circuits import (
    CompiledCircuit,
    ConstraintSystem,
    MerkleTree,
    compile_circuit,
    merkle_root_gadget,
    poseidon,
    verify_path,
)
from prooflane.errors import CircuitError, UnsatisfiedConstraint

DEPTH = 4
LEAVES = [1000 + 3 * i for i in range(2**DEPTH)]


def inclusion(cs: ConstraintSystem) -> None:
    root = cs.public_input("root")
    index = cs.public_input("index")
    leaf = cs.private_input("leaf")
    siblings = cs.private_inputs("siblings", DEPTH)
    bits = cs.to_bits(index, DEPTH, "index")
    cs.assert_equal(merkle_root_gadget(cs, leaf, bits, siblings, "path"), root, "root")


@pytest.fixture(scope="module")
def tree() -> MerkleTree:
    return MerkleTree.build(LEAVES)


@pytest.fixture(scope="module")
def circuit() -> CompiledCircuit:
    return compile_circuit(inclusion)


def test_tree_root_is_the_hash_of_its_children() -> None:
    tree = MerkleTree.build([5, 6, 7, 8])
    assert tree.root == poseidon([poseidon([5, 6]), poseidon([7, 8])])
    assert tree.depth == 2
    assert tree.path(2) == [8, poseidon([5, 6])]


def test_tree_round_trips_through_bytes(tree: MerkleTree) -> None:
    again = MerkleTree.from_bytes(tree.to_bytes(), len(LEAVES))
    assert again.root == tree.root and again.path(9) == tree.path(9)


def test_native_paths_verify(tree: MerkleTree) -> None:
    for i in (0, 5, 15):
        assert verify_path(tree.leaf(i), i, tree.path(i), tree.root)
    assert not verify_path(tree.leaf(5) + 1, 5, tree.path(5), tree.root)


def test_trees_need_a_power_of_two_leaves() -> None:
    with pytest.raises(CircuitError, match="power of two"):
        MerkleTree.build([1, 2, 3])


def test_gadget_accepts_every_leaf(tree: MerkleTree, circuit: CompiledCircuit) -> None:
    assert circuit.n_constraints == DEPTH + 1 + DEPTH * 244 + 1
    for i in range(len(LEAVES)):
        circuit.witness_values(
            {"root": tree.root, "index": i, "leaf": tree.leaf(i), "siblings": tree.path(i)}
        )


def test_gadget_rejects_a_leaf_not_in_the_tree(tree: MerkleTree, circuit: CompiledCircuit) -> None:
    inputs: dict[str, int | list[int]] = {
        "root": tree.root,
        "index": 3,
        "leaf": 999,
        "siblings": tree.path(3),
    }
    with pytest.raises(UnsatisfiedConstraint) as caught:
        circuit.witness_values(inputs)
    assert caught.value.name == "root"
    assert caught.value.index == circuit.n_constraints - 1


def test_gadget_rejects_a_path_at_another_index(tree: MerkleTree, circuit: CompiledCircuit) -> None:
    inputs: dict[str, int | list[int]] = {
        "root": tree.root,
        "index": 4,
        "leaf": tree.leaf(3),
        "siblings": tree.path(3),
    }
    with pytest.raises(UnsatisfiedConstraint, match="root"):
        circuit.witness_values(inputs)
