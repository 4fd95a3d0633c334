"""Groth16 verification: ``e(A, B) = e(alpha, beta) * e(L, gamma) * e(C, delta)`` with
``L = IC[0] + sum(public[i] * IC[i + 1])``.

A verification key's points are checked and converted to the library's once a process (``_prepared``,
the few keys verified last): a finalizer verifies every partition's proof against the same key, and a
circuit with many public signals has as many IC points (256 of them, SHA-256's output bits, took 24 ms a
proof to convert, a twentieth of the proof's CPU).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from .adapters import library
from .errors import KeyMismatchError
from .proof import Proof, VerificationKey

__all__ = ["verify"]

_PREPARED_KEYS = 8
"""Verification keys kept converted in a process (a daemon's finalizer proves a few keys at a time)."""


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
        alpha, beta, gamma, delta, ic = _prepared(vk)
        a, b, c = be.g1(proof.a), be.g2(proof.b), be.g1(proof.c)
    except ValueError:
        return False
    acc = ic[0]
    for v, p in zip(public, ic[1:], strict=True):
        if v:
            acc = acc + (p if v == 1 else be.mul(p, v))
    return be.pairing_check([-a, alpha, acc, c], [b, beta, gamma, delta])


@functools.lru_cache(maxsize=_PREPARED_KEYS)
def _prepared(vk: VerificationKey) -> tuple[Any, Any, Any, Any, tuple[Any, ...]]:
    """``vk``'s alpha, beta, gamma, delta and IC points as the library's, each checked (ValueError for one
    that is not on the curve or, in G2, not in the group: not remembered, so it is refused every time)."""
    be = library(vk.curve)
    ic = tuple(be.g1(p) for p in vk.ic)
    return be.g1(vk.alpha1), be.g2(vk.beta2), be.g2(vk.gamma2), be.g2(vk.delta2), ic
