"""prooflane's storage-proof circuits for the built-in proof kinds, one partition per circuit.

These are prooflane's own circuits, modelled on the facts Filecoin's proofs establish; they are not
Filecoin chain proofs and no Filecoin verifier accepts them.

- ``winning-post``, ``window-post``: the partition's K challenged leaves of the replica are in the tree
  whose root is ``comm_r``. Public signals: ``comm_r``, then the K challenge indexes.
- ``porep-c2``: for each of K challenges, the data leaf opens under ``comm_d``, the replica leaf opens
  under ``comm_r`` at the same index, and ``replica = data + Poseidon(replica_id, index)``. Public:
  ``comm_d``, ``comm_r``, ``replica_id``, then the challenges.
- ``snap-update``: the same against the updated replica: ``comm_d``, ``comm_r_update``, ``update_key``,
  then the challenges, and ``replica = data + Poseidon(update_key, index)``.

Challenge ``j`` of partition ``p`` is ``SHA-256("prooflane/challenge/v1" | kind | 0 | randomness |
sector_id (8 bytes LE) | p (4 bytes LE) | j (4 bytes LE))`` read little-endian, modulo the leaf count. Each
index is public and constrained to its ``depth`` path bits, so the openings are at the challenged leaves.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from typing import Any

from ..errors import CircuitError, SectorError
from ..groth16 import BN128, Curve, Synthesized, Witness
from .builder import CompiledCircuit, ConstraintSystem, InputValue, LinearCombination, compile_circuit
from .merkle import merkle_root_gadget
from .poseidon import poseidon_gadget
from .profiles import KINDS, POST_KINDS, Profile, profile_by_name
from .sector import Sector

__all__ = [
    "challenges",
    "compile_storage_circuit",
    "partition_inputs",
    "partition_public",
    "partition_synthesize",
    "partition_witness",
    "storage_circuit",
]

_ENCODING = {"porep-c2": ("comm_r", "replica_id", "r"), "snap-update": ("comm_r_update", "update_key", "u")}


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise CircuitError(f"unknown proof kind {kind!r}: expected one of {', '.join(KINDS)}")


def _post_circuit(k: int, depth: int) -> Callable[[ConstraintSystem], None]:
    def synthesize(cs: ConstraintSystem) -> None:
        comm_r = cs.public_input("comm_r")
        indexes = cs.public_inputs("challenges", k)
        leaves = cs.private_inputs("replica_leaves", k)
        paths = cs.private_inputs("replica_paths", k * depth)
        for j in range(k):
            with cs.namespace(f"challenge[{j}]"):
                bits = cs.to_bits(indexes[j], depth, "index")
                root = merkle_root_gadget(cs, leaves[j], bits, paths[j * depth : (j + 1) * depth], "replica")
                cs.assert_equal(root, comm_r, "replica_root")

    return synthesize


def _encoding_circuit(
    k: int, depth: int, root_name: str, key_name: str
) -> Callable[[ConstraintSystem], None]:
    def synthesize(cs: ConstraintSystem) -> None:
        comm_d = cs.public_input("comm_d")
        comm_r = cs.public_input(root_name)
        key_id = cs.public_input(key_name)
        indexes = cs.public_inputs("challenges", k)
        data = cs.private_inputs("data_leaves", k)
        replica = cs.private_inputs("replica_leaves", k)
        data_paths = cs.private_inputs("data_paths", k * depth)
        replica_paths = cs.private_inputs("replica_paths", k * depth)
        for j in range(k):
            span = slice(j * depth, (j + 1) * depth)
            with cs.namespace(f"challenge[{j}]"):
                bits = cs.to_bits(indexes[j], depth, "index")
                root_d = merkle_root_gadget(cs, data[j], bits, data_paths[span], "data")
                cs.assert_equal(root_d, comm_d, "data_root")
                root_r = merkle_root_gadget(cs, replica[j], bits, replica_paths[span], "replica")
                cs.assert_equal(root_r, comm_r, "replica_root")
                key: LinearCombination = poseidon_gadget(cs, [key_id, indexes[j]], "key")
                cs.assert_equal(data[j] + key, replica[j], "encoding")

    return synthesize


@functools.cache
def _compiled(shape: tuple[str, int, int], curve: Curve) -> CompiledCircuit:
    kind, k, depth = shape
    if kind == "post":
        return compile_circuit(_post_circuit(k, depth), curve)
    root_name, key_name, _ = _ENCODING[kind]
    return compile_circuit(_encoding_circuit(k, depth, root_name, key_name), curve)


def _shape(kind: str, profile: Profile) -> tuple[str, int, int]:
    _check_kind(kind)
    # both PoSt kinds share one circuit shape; the encoding kinds differ in their public input names
    return ("post" if kind in POST_KINDS else kind, profile.challenges(kind), profile.depth)


def storage_circuit(kind: str, profile: str | Profile, curve: Curve = BN128) -> CompiledCircuit:
    """The compiled circuit of one partition of ``kind`` at ``profile`` (compiled once per process)."""
    return _compiled(_shape(kind, profile_by_name(profile)), curve)


def compile_storage_circuit(kind: str, profile: str | Profile, curve: Curve = BN128) -> CompiledCircuit:
    """Compile the circuit afresh, bypassing the cache (what a prover without cached matrices pays)."""
    return _compiled.__wrapped__(_shape(kind, profile_by_name(profile)), curve)


def challenges(
    kind: str, profile: str | Profile, sector_id: int, randomness: bytes, partition: int
) -> list[int]:
    """The leaf indexes partition ``partition`` of ``kind`` proves (see the module docstring)."""
    _check_kind(kind)
    prof = profile_by_name(profile)
    if partition < 0:
        raise CircuitError(f"partition {partition}: expected a non-negative index")
    prefix = b"prooflane/challenge/v1" + kind.encode() + b"\x00" + randomness
    prefix += sector_id.to_bytes(8, "little") + partition.to_bytes(4, "little")
    return [
        int.from_bytes(hashlib.sha256(prefix + j.to_bytes(4, "little")).digest(), "little") % prof.leaf_count
        for j in range(prof.challenges(kind))
    ]


def partition_inputs(
    kind: str, profile: str | Profile, sector: Sector, randomness: bytes, partition: int, curve: Curve = BN128
) -> dict[str, InputValue]:
    """The circuit inputs (public and private) of one partition, read from ``sector``."""
    prof = profile_by_name(profile)
    _check_kind(kind)
    if sector.size_bytes != prof.sector_bytes:
        raise SectorError(
            f"{sector.path}: sector of {sector.size_bytes} bytes, "
            f"but profile {prof.name!r} proves sectors of {prof.sector_bytes} bytes"
        )
    indexes = challenges(kind, prof, sector.sector_id, randomness, partition)
    roots = sector.roots(curve)
    if kind in POST_KINDS:
        tree = sector.tree("r", curve)
        return {
            "comm_r": roots.comm_r,
            "challenges": indexes,
            "replica_leaves": [tree.leaf(i) for i in indexes],
            "replica_paths": [s for i in indexes for s in tree.path(i)],
        }
    root_name, key_name, which = _ENCODING[kind]
    data_tree, replica_tree = sector.tree("d", curve), sector.tree(which, curve)
    return {
        "comm_d": roots.comm_d,
        root_name: roots.comm_r if which == "r" else roots.comm_r_update,
        key_name: sector.replica_id if which == "r" else sector.update_key,
        "challenges": indexes,
        # the data leaves come from the data file itself, so a sector changed after its commitment fails
        "data_leaves": [sector.data_leaf(i) % curve.r for i in indexes],
        "replica_leaves": [replica_tree.leaf(i) for i in indexes],
        "data_paths": [s for i in indexes for s in data_tree.path(i)],
        "replica_paths": [s for i in indexes for s in replica_tree.path(i)],
    }


def partition_witness(
    kind: str, profile: str | Profile, sector: Sector, randomness: bytes, partition: int, curve: Curve = BN128
) -> Witness:
    """The full witness of one partition; raises UnsatisfiedConstraint if the sector cannot be proven."""
    circuit = storage_circuit(kind, profile, curve)
    return circuit.witness(partition_inputs(kind, profile, sector, randomness, partition, curve))


def partition_synthesize(
    kind: str, profile: str | Profile, sector: Sector, randomness: bytes, partition: int, curve: Curve = BN128
) -> Synthesized:
    """Witness and A·w, B·w, C·w of one partition from the cached matrices, in one pass (checked).

    Equal to ``groth16.synthesize(key, partition_witness(...))`` for the kind's key, without evaluating the
    matrices twice; raises UnsatisfiedConstraint if the sector cannot be proven.
    """
    circuit = storage_circuit(kind, profile, curve)
    return circuit.synthesize(partition_inputs(kind, profile, sector, randomness, partition, curve))


def partition_public(
    kind: str, profile: str | Profile, sector: Sector, randomness: bytes, partition: int, curve: Curve = BN128
) -> list[int]:
    """The public signals a partition's proof must verify against (without computing the witness)."""
    inputs: dict[str, Any] = dict(partition_inputs(kind, profile, sector, randomness, partition, curve))
    names = storage_circuit(kind, profile, curve).public_names
    flat: list[int] = []
    seen: set[str] = set()
    for name in names:
        base = name.split("[")[0]
        if base in seen:
            continue
        seen.add(base)
        value = inputs[base]
        flat.extend(value if isinstance(value, list) else [value])
    return flat
