"""snarkjs' roots of unity: ``w_{2^s} = g^t`` with ``g`` the smallest quadratic non-residue and
``r - 1 = 2^s t``, ``w_n`` its powers. Every NTT of prooflane (the C extension's, the libraries', the CUDA
kernels') evaluates at these, so H comes out in the order the key's H section expects."""

from __future__ import annotations

from functools import cache

__all__ = ["coset_roots", "root_of_unity"]


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
    """snarkjs' primitive ``n``-th root of unity in the field of ``r`` (``n`` a power of two)."""
    s, w = _two_adic(r)
    log_n = n.bit_length() - 1
    if n != 1 << log_n or log_n > s:
        raise ValueError(f"no {n}-th roots of unity in the field of {r}")
    return pow(w, 1 << (s - log_n), r)


@cache
def coset_roots(r: int, n: int) -> bytes:
    """``w_n``, ``w_2n`` and ``1/n`` as the C extension's ``coset_h`` takes them (32 bytes little-endian
    each)."""
    return b"".join(
        x.to_bytes(32, "little") for x in (root_of_unity(r, n), root_of_unity(r, 2 * n), pow(n, -1, r))
    )
