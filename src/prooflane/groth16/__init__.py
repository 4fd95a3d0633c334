"""Groth16 proving on BN254 and BLS12-381 with the circom/snarkjs file formats."""

from .curves import BLS12381, BN128, CURVES, Curve, curve_by_name, curve_by_prime
from .field import FieldVector, from_ints, to_ints
from .r1cs import R1CS, SparseMatrix

__all__ = [
    "BLS12381",
    "BN128",
    "CURVES",
    "R1CS",
    "Curve",
    "FieldVector",
    "SparseMatrix",
    "curve_by_name",
    "curve_by_prime",
    "from_ints",
    "to_ints",
]
