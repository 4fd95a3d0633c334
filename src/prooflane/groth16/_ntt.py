"""The quotient polynomial's evaluations on the odd coset, in snarkjs' domain order.

snarkjs' roots of unity: ``w_{2^s} = g^t`` with ``g`` the smallest quadratic non-residue and
``r - 1 = 2^s t``, ``w_n`` its powers. zksnake's FFT may use another primitive root ``w_n^k`` (k odd);
its evaluation ``j`` then sits at snarkjs index ``k*j mod n``, and we permute.
"""

from __future__ import annotations

from functools import cache

import numpy as np
from numpy.typing import NDArray

from ._native import Backend, cpu_threads
from .field import FieldVector, from_ints, to_ints

__all__ = ["coset_h", "root_of_unity"]


@cache
def _two_adic(r: int) -> tuple[int, int]:
    """(s, w) with ``r - 1 = 2^s t`` and ``w = g^t`` for the smallest quadratic non-residue ``g``."""
    g = 2
    while pow(g, (r - 1) // 2, r) != r - 1:
        g += 1
    s, t = 0, r - 1
    while t % 2 == 0:
        s, t = s + 1, t // 2
    return s, pow(g, t, r)


def root_of_unity(r: int, n: int) -> int:
    """snarkjs' primitive ``n``-th root of unity in the field of ``r`` (``n`` a power of two); the cpu
    path and the cuda kernels both use it."""
    s, w = _two_adic(r)
    log_n = n.bit_length() - 1
    if n != 1 << log_n or log_n > s:
        raise ValueError(f"no {n}-th roots of unity in the field of {r}")
    return pow(w, 1 << (s - log_n), r)


@cache
def _plan(backend: Backend, n: int) -> tuple[NDArray[np.int64], list[int]]:
    """(permutation from zksnake order to snarkjs order, powers of the coset shift ``w_2n``)."""
    r = backend.curve.r
    w_s = root_of_unity(r, n)
    w_z = backend.fft([0, 1] + [0] * (n - 2), n)[1] if n > 1 else 1
    log_n = n.bit_length() - 1
    k = 0  # Pohlig-Hellman in a group of order 2^log_n: w_z = w_s^k
    inv = pow(w_s, -1, r)
    for i in range(log_n):
        if pow(w_z * pow(inv, k, r) % r, 1 << (log_n - i - 1), r) != 1:
            k += 1 << i
    perm = (np.arange(n, dtype=np.int64) * k) % n
    shift = root_of_unity(r, 2 * n)
    powers = [1] * n
    for i in range(1, n):
        powers[i] = powers[i - 1] * shift % r
    return perm, powers


def coset_h(
    backend: Backend, a: FieldVector, b: FieldVector, c: FieldVector, n: int, *, threads: int | None = None
) -> FieldVector:
    """``a*b - c`` on the odd coset ``w_2n * <w_n>``, from the three vectors' values on ``<w_n>``: by the
    C extension (snarkjs' roots directly, ``threads`` threads) where it is built, else by zksnake's FFT."""
    r = backend.curve.r
    if backend.native:
        return backend.coset_h_native(a, b, c, n, _roots(r, n), threads or cpu_threads())
    perm, powers = _plan(backend, n)
    order = None if bool((perm == np.arange(n)).all()) else perm.tolist()
    on_a, on_b, on_c = (_on_coset(backend, vec, n, order, powers) for vec in (a, b, c))
    return from_ints([(x * y - z) % r for x, y, z in zip(on_a, on_b, on_c, strict=True)])


@cache
def _roots(r: int, n: int) -> bytes:
    """``w_n``, ``w_2n`` and ``1/n`` as the C extension takes them (32-byte little-endian each)."""
    return b"".join(
        x.to_bytes(32, "little") for x in (root_of_unity(r, n), root_of_unity(r, 2 * n), pow(n, -1, r))
    )


def _on_coset(
    backend: Backend, vec: FieldVector, n: int, order: list[int] | None, powers: list[int]
) -> list[int]:
    """The values of one vector's polynomial on the odd coset. Each step drops the list before it, so
    that at most two lists of ``n`` ints are alive (at 2^20 each is about 70 MB of Python ints)."""
    r = backend.curve.r
    values = to_ints(vec)
    values.extend([0] * (n - len(values)))
    if order is not None:
        values = [values[i] for i in order]
    coeffs = backend.ifft(values, n)
    del values
    coeffs = [x * p % r for x, p in zip(coeffs, powers, strict=True)]
    evals = backend.fft(coeffs, n)
    del coeffs
    if order is not None:
        ordered = [0] * n
        for j, i in enumerate(order):
            ordered[i] = evals[j]
        evals = ordered
    return evals
