"""Montgomery arithmetic over a prime field on 32-bit limbs, as numba CUDA device functions.

An element is ``L`` little-endian 32-bit limbs (``uint32``) in Montgomery form (``x * 2^(32 L) mod p``);
every product of two limbs is taken in 64 bits, so the same code runs on a GPU and in numba's simulator.
Every value is an explicit ``np.uint64``/``np.uint32``: numba would turn a mix of signed and unsigned
64-bit integers into floats, and numpy (the simulator) would overflow a product of two ``uint32``.

Device functions write into ``out``, which may alias an input: each computes into local scratch first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import cuda as _cuda
from numpy.typing import NDArray

from ._runtime import simulated

cuda: Any = _cuda  # numba's types do not describe its kernel API; the simulator swaps this name

# The reductions launch small grids on purpose, and callers may hand kernels host arrays: numba warns of
# both, and where warnings are errors (the tests) that would fail correct launches.
_numba_config: Any = cuda.config
_numba_config.CUDA_LOW_OCCUPANCY_WARNINGS = 0
_numba_config.CUDA_WARN_ON_IMPLICIT_COPY = 0

__all__ = ["Field", "device_function", "field", "from_limbs", "to_limbs"]

MASK = np.uint64(0xFFFFFFFF)
SHIFT = np.uint64(32)
ONE = np.uint64(1)
ZERO = np.uint64(0)
RADIX = np.uint64(1 << 32)


def device_function(*, inline: bool) -> Any:
    """The decorator of a device function. ``inline``: forced into its caller on a GPU (the field
    operations: a call each would cost more than the work); the point operations stay calls, which keeps
    the kernels' code small. The simulator has no such option."""
    if simulated() or not inline:
        return cuda.jit(device=True)
    return cuda.jit(device=True, forceinline=True)


def to_limbs(values: list[int], limbs: int) -> NDArray[np.uint32]:
    """Python ints (below ``2^(32 limbs)``) as rows of little-endian 32-bit limbs."""
    raw = b"".join(v.to_bytes(4 * limbs, "little") for v in values)
    return np.frombuffer(raw, dtype="<u4").reshape(-1, limbs).astype(np.uint32, copy=True)


def from_limbs(rows: NDArray[np.uint32]) -> list[int]:
    """Rows of little-endian 32-bit limbs as Python ints."""
    limbs = rows.shape[-1]
    raw = np.ascontiguousarray(rows, dtype="<u4").tobytes()
    return [int.from_bytes(raw[i : i + 4 * limbs], "little") for i in range(0, len(raw), 4 * limbs)]


@dataclass(frozen=True, eq=False)
class Field:
    """One prime field: its host-side constants and its device functions (``numba.cuda`` dispatchers)."""

    p: int
    limbs: int
    r: int  # the Montgomery radix 2^(32 limbs) mod p
    r2: int  # r^2 mod p: Montgomery form of x is mont_mul(x, r2)
    mul: Any  # mul(out, a, b): out = a * b / R
    add: Any  # add(out, a, b)
    sub: Any  # sub(out, a, b)
    copy: Any  # copy(out, a)
    set_zero: Any  # set_zero(out)
    set_one: Any  # set_one(out): the Montgomery form of 1
    is_zero: Any  # is_zero(a) -> bool
    equal: Any  # equal(a, b) -> bool

    def mont(self, values: list[int]) -> NDArray[np.uint32]:
        """Host: Montgomery limbs of canonical ints."""
        return to_limbs([v * self.r % self.p for v in values], self.limbs)

    def unmont(self, rows: NDArray[np.uint32]) -> list[int]:
        """Host: canonical ints of Montgomery limbs."""
        inv = pow(self.r, -1, self.p)
        return [v * inv % self.p for v in from_limbs(rows)]


_FIELDS: dict[int, Field] = {}


def field(p: int) -> Field:
    """The (process-wide, lazily built) field of the prime ``p``."""
    found = _FIELDS.get(p)
    if found is None:
        found = _FIELDS[p] = _build(p)
    return found


def _build(p: int) -> Field:
    jit = device_function(inline=True)
    L = (p.bit_length() + 31) // 32
    L1, L2 = L + 1, L + 2  # local array sizes must be constants
    P = to_limbs([p], L)[0]
    N0 = np.uint64((-pow(p, -1, 1 << 32)) % (1 << 32))  # -p^-1 mod 2^32
    radix = (1 << (32 * L)) % p
    R1 = to_limbs([radix], L)[0]

    @jit
    def reduce_into(out: Any, t: Any) -> None:
        """out = t - p if t (L+1 limbs, below 2p) >= p, else t."""
        d = cuda.local.array(L, np.uint32)
        borrow = ZERO
        for j in range(L):
            s = RADIX + np.uint64(t[j]) - np.uint64(P[j]) - borrow
            d[j] = np.uint32(s & MASK)
            borrow = ONE - (s >> SHIFT)
        if t[L] != ZERO or borrow == ZERO:
            for j in range(L):
                out[j] = d[j]
        else:
            for j in range(L):
                out[j] = np.uint32(t[j])

    @jit
    def mul(out: Any, a: Any, b: Any) -> None:
        # CIOS: t stays below 2p; each limb sum fits 64 bits: (2^32-1)^2 + 2 (2^32-1) = 2^64 - 1.
        t = cuda.local.array(L2, np.uint64)
        for j in range(L + 2):
            t[j] = ZERO
        for i in range(L):
            bi = np.uint64(b[i])
            c = ZERO
            for j in range(L):
                s = t[j] + np.uint64(a[j]) * bi + c
                t[j] = s & MASK
                c = s >> SHIFT
            s = t[L] + c
            t[L] = s & MASK
            t[L + 1] = s >> SHIFT
            m = (t[0] * N0) & MASK
            s = t[0] + m * np.uint64(P[0])
            c = s >> SHIFT
            for j in range(1, L):
                s = t[j] + m * np.uint64(P[j]) + c
                t[j - 1] = s & MASK
                c = s >> SHIFT
            s = t[L] + c
            t[L - 1] = s & MASK
            t[L] = t[L + 1] + (s >> SHIFT)
        reduce_into(out, t)

    @jit
    def add(out: Any, a: Any, b: Any) -> None:
        t = cuda.local.array(L1, np.uint64)
        c = ZERO
        for j in range(L):
            s = np.uint64(a[j]) + np.uint64(b[j]) + c
            t[j] = s & MASK
            c = s >> SHIFT
        t[L] = c
        reduce_into(out, t)

    @jit
    def sub(out: Any, a: Any, b: Any) -> None:
        d = cuda.local.array(L, np.uint64)
        borrow = ZERO
        for j in range(L):
            s = RADIX + np.uint64(a[j]) - np.uint64(b[j]) - borrow
            d[j] = s & MASK
            borrow = ONE - (s >> SHIFT)
        if borrow != ZERO:  # a < b: add p back (the carry out cancels the borrow)
            c = ZERO
            for j in range(L):
                s = d[j] + np.uint64(P[j]) + c
                d[j] = s & MASK
                c = s >> SHIFT
        for j in range(L):
            out[j] = np.uint32(d[j])

    @jit
    def copy(out: Any, a: Any) -> None:
        for j in range(L):
            out[j] = a[j]

    @jit
    def set_zero(out: Any) -> None:
        for j in range(L):
            out[j] = np.uint32(0)

    @jit
    def set_one(out: Any) -> None:
        for j in range(L):
            out[j] = R1[j]

    @jit
    def is_zero(a: Any) -> bool:
        acc = np.uint32(0)
        for j in range(L):
            acc |= a[j]
        return bool(acc == np.uint32(0))

    @jit
    def equal(a: Any, b: Any) -> bool:
        acc = np.uint32(0)
        for j in range(L):
            acc |= a[j] ^ b[j]
        return bool(acc == np.uint32(0))

    return Field(p, L, radix, radix * radix % p, mul, add, sub, copy, set_zero, set_one, is_zero, equal)
