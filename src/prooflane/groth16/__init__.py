"""Groth16 proving on BN254 and BLS12-381 with the circom/snarkjs file formats.

The prover is split the way a device prover is: ``synthesize`` -> ``prove_start`` (H by NTT, the G1 MSMs)
-> ``prove_finish`` (the G2 MSM, assembly); ``verify`` checks a proof; ``setup`` makes an UNSAFE
development key.
"""

from .arithmetic import arithmetics, products
from .curves import BLS12381, BN128, CURVES, Curve, curve_by_name, curve_by_prime
from .field import FieldVector, from_ints, to_ints
from .proof import Proof, VerificationKey
from .prover import (
    ProvingState,
    Synthesized,
    preload,
    prove_b2,
    prove_finish,
    prove_start,
    release,
    synthesize,
)
from .proving import prove
from .r1cs import R1CS, SparseMatrix, read_r1cs, write_r1cs
from .setup import setup
from .verifier import verify
from .witness import Witness, read_wtns, write_wtns
from .zkey import ProvingKey, read_zkey, write_zkey

__all__ = [
    "BLS12381",
    "BN128",
    "CURVES",
    "R1CS",
    "Curve",
    "FieldVector",
    "Proof",
    "ProvingKey",
    "ProvingState",
    "SparseMatrix",
    "Synthesized",
    "VerificationKey",
    "Witness",
    "arithmetics",
    "curve_by_name",
    "curve_by_prime",
    "from_ints",
    "preload",
    "products",
    "prove",
    "prove_b2",
    "prove_finish",
    "prove_start",
    "read_r1cs",
    "read_wtns",
    "read_zkey",
    "release",
    "setup",
    "synthesize",
    "to_ints",
    "verify",
    "write_r1cs",
    "write_wtns",
    "write_zkey",
]
