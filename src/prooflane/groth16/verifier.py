"""Groth16 verification: ``e(A, B) = e(alpha, beta) * e(L, gamma) * e(C, delta)`` with
``L = IC[0] + sum(public[i] * IC[i + 1])``."""

from __future__ import annotations

from collections.abc import Sequence

from .adapters import library
from .errors import KeyMismatchError
from .proof import Proof, VerificationKey

__all__ = ["verify"]


def verify(vk: VerificationKey, public: Sequence[int], proof: Proof) -> bool:
    """Whether ``proof`` proves ``public`` under ``vk``. A proof whose points are not on the curve, or a
    public value outside the field, is invalid (False); a different curve or count of public signals is a
    mismatch of inputs (KeyMismatchError)."""
    if proof.curve != vk.curve:
        raise KeyMismatchError(f"the proof is on {proof.curve.name}, the verification key on {vk.curve.name}")
    if len(public) != vk.n_public:
        raise KeyMismatchError(
            f"{len(public)} public signals given, the verification key expects {vk.n_public}"
        )
    r = vk.curve.r
    if any(not 0 <= v < r for v in public):
        return False
    be = library(vk.curve)
    try:
        a, b, c = be.g1(proof.a), be.g2(proof.b), be.g1(proof.c)
        ic = [be.g1(p) for p in vk.ic]
        alpha, beta, gamma, delta = be.g1(vk.alpha1), be.g2(vk.beta2), be.g2(vk.gamma2), be.g2(vk.delta2)
    except ValueError:
        return False
    acc = ic[0]
    for v, p in zip(public, ic[1:], strict=True):
        if v:
            acc = acc + be.mul(p, v)
    return be.pairing_check([-a, alpha, acc, c], [b, beta, gamma, delta])
