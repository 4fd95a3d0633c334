"""Circuits in Python: the constraint-system builder, Poseidon and Merkle gadgets, storage-proof circuits.

Write a circuit as a function over a ``ConstraintSystem`` and ``compile_circuit`` it once; the compiled
circuit gives the R1CS and, per job, the witness and the prover's input (``synthesize``). The built-in
storage-proof circuits (``storage_circuit``, ``partition_witness``) are prooflane's own, not Filecoin
chain proofs.
"""

from .builder import (
    Assignment,
    Circuit,
    CompiledCircuit,
    ConstraintSystem,
    LinearCombination,
    compile_circuit,
)
from .merkle import MerkleTree, merkle_root_gadget, verify_path
from .poseidon import PoseidonParams, poseidon, poseidon_gadget, poseidon_many, poseidon_params
from .profiles import KINDS, PROFILES, Profile, profile_by_name
from .sector import Sector, SectorRoots
from .storage import (
    challenges,
    partition_inputs,
    partition_public,
    partition_synthesize,
    partition_witness,
    storage_circuit,
)

__all__ = [
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
]
