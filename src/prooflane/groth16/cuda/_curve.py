"""Short-Weierstrass G1 (``y^2 = x^3 + b``) in Jacobian coordinates, as numba CUDA device functions.

A Jacobian point is a ``(3, L)`` array of Montgomery limbs ``X, Y, Z`` standing for ``(X/Z^2, Y/Z^3)``;
``Z = 0`` is the point at infinity. An affine base is a ``(2, L)`` array ``x, y`` (never infinity: the
host drops bases at infinity before they reach a kernel). Formulas: dbl-2009-l, add-2007-bl and
madd-2007-bl of the Explicit-Formulas Database, for curves with ``a = 0``; each handles its special cases
(an operand at infinity, equal operands, opposite operands).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import cuda as _cuda

from ._field import Field, device_function, field

cuda: Any = _cuda  # numba's types do not describe its kernel API; the simulator swaps this name

__all__ = ["G1Ops", "g1_ops"]


@dataclass(frozen=True, eq=False)
class G1Ops:
    """The device functions of one curve's G1 over its base field ``fq``."""

    fq: Field
    set_infinity: Any  # set_infinity(out)
    is_infinity: Any  # is_infinity(p) -> bool
    copy: Any  # copy(out, p)
    double: Any  # double(out, p)
    add: Any  # add(out, p, q)
    add_affine: Any  # add_affine(out, p, q_affine)
    mul_small: Any  # mul_small(out, p, k): k * p for a non-negative int64 k


_OPS: dict[int, G1Ops] = {}


def g1_ops(q: int) -> G1Ops:
    """The (process-wide, lazily built) G1 device functions over the base field ``q``."""
    found = _OPS.get(q)
    if found is None:
        found = _OPS[q] = _build(field(q))
    return found


def _build(fq: Field) -> G1Ops:
    jit = device_function(inline=False)
    L = fq.limbs
    fmul, fadd, fsub, fcopy = fq.mul, fq.add, fq.sub, fq.copy
    fzero, fone, fis_zero = fq.set_zero, fq.set_one, fq.is_zero

    @jit
    def set_infinity(out: Any) -> None:
        fone(out[0])
        fone(out[1])
        fzero(out[2])

    @jit
    def is_infinity(p: Any) -> bool:
        return bool(fis_zero(p[2]))

    @jit
    def copy(out: Any, p: Any) -> None:
        fcopy(out[0], p[0])
        fcopy(out[1], p[1])
        fcopy(out[2], p[2])

    @jit
    def double(out: Any, p: Any) -> None:
        if fis_zero(p[2]):
            set_infinity(out)
            return
        t = cuda.local.array((6, L), np.uint32)
        a, b, c, d, e, f = t[0], t[1], t[2], t[3], t[4], t[5]
        fmul(a, p[0], p[0])  # A = X^2
        fmul(b, p[1], p[1])  # B = Y^2
        fmul(c, b, b)  # C = B^2
        fadd(d, p[0], b)
        fmul(d, d, d)
        fsub(d, d, a)
        fsub(d, d, c)
        fadd(d, d, d)  # D = 2 ((X + B)^2 - A - C)
        fadd(e, a, a)
        fadd(e, e, a)  # E = 3 A
        fmul(f, e, e)  # F = E^2
        fmul(b, p[1], p[2])
        fadd(out[2], b, b)  # Z3 = 2 Y Z (p is not read after this)
        fsub(f, f, d)
        fsub(out[0], f, d)  # X3 = F - 2 D
        fsub(d, d, out[0])
        fmul(d, e, d)
        fadd(c, c, c)
        fadd(c, c, c)
        fadd(c, c, c)
        fsub(out[1], d, c)  # Y3 = E (D - X3) - 8 C

    @jit
    def add_affine(out: Any, p: Any, q: Any) -> None:
        if fis_zero(p[2]):
            fcopy(out[0], q[0])
            fcopy(out[1], q[1])
            fone(out[2])
            return
        t = cuda.local.array((7, L), np.uint32)
        z1z1, u2, s2, h, hh, i, j = t[0], t[1], t[2], t[3], t[4], t[5], t[6]
        fmul(z1z1, p[2], p[2])
        fmul(u2, q[0], z1z1)
        fmul(s2, q[1], p[2])
        fmul(s2, s2, z1z1)
        fsub(h, u2, p[0])
        fsub(s2, s2, p[1])  # S2 - Y1
        if fis_zero(h):
            if fis_zero(s2):
                double(out, p)
            else:
                set_infinity(out)
            return
        fadd(s2, s2, s2)  # r = 2 (S2 - Y1)
        fmul(hh, h, h)
        fadd(i, hh, hh)
        fadd(i, i, i)  # I = 4 HH
        fmul(j, h, i)  # J = H I
        fmul(u2, p[0], i)  # V = X1 I
        fadd(i, p[2], h)
        fmul(i, i, i)
        fsub(i, i, z1z1)
        fsub(i, i, hh)  # Z3 = (Z1 + H)^2 - Z1Z1 - HH
        fmul(hh, p[1], j)
        fadd(hh, hh, hh)  # 2 Y1 J
        fmul(z1z1, s2, s2)
        fsub(z1z1, z1z1, j)
        fsub(z1z1, z1z1, u2)
        fsub(out[0], z1z1, u2)  # X3 = r^2 - J - 2 V
        fsub(u2, u2, out[0])
        fmul(u2, s2, u2)
        fsub(out[1], u2, hh)  # Y3 = r (V - X3) - 2 Y1 J
        fcopy(out[2], i)

    @jit
    def add(out: Any, p: Any, q: Any) -> None:
        if fis_zero(p[2]):
            copy(out, q)
            return
        if fis_zero(q[2]):
            copy(out, p)
            return
        t = cuda.local.array((8, L), np.uint32)
        z1z1, z2z2, u1, u2, s1, s2, h, i = t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]
        fmul(z1z1, p[2], p[2])
        fmul(z2z2, q[2], q[2])
        fmul(u1, p[0], z2z2)
        fmul(u2, q[0], z1z1)
        fmul(s1, p[1], q[2])
        fmul(s1, s1, z2z2)
        fmul(s2, q[1], p[2])
        fmul(s2, s2, z1z1)
        fsub(h, u2, u1)
        fsub(s2, s2, s1)  # S2 - S1
        if fis_zero(h):
            if fis_zero(s2):
                double(out, p)
            else:
                set_infinity(out)
            return
        fadd(s2, s2, s2)  # r = 2 (S2 - S1)
        fadd(i, h, h)
        fmul(i, i, i)  # I = (2 H)^2
        fmul(u2, h, i)  # J = H I
        fmul(u1, u1, i)  # V = U1 I
        fadd(i, p[2], q[2])
        fmul(i, i, i)
        fsub(i, i, z1z1)
        fsub(i, i, z2z2)
        fmul(i, i, h)  # Z3 = ((Z1 + Z2)^2 - Z1Z1 - Z2Z2) H
        fmul(s1, s1, u2)
        fadd(s1, s1, s1)  # 2 S1 J
        fmul(z1z1, s2, s2)
        fsub(z1z1, z1z1, u2)
        fsub(z1z1, z1z1, u1)
        fsub(out[0], z1z1, u1)  # X3 = r^2 - J - 2 V
        fsub(u1, u1, out[0])
        fmul(u1, s2, u1)
        fsub(out[1], u1, s1)  # Y3 = r (V - X3) - 2 S1 J
        fcopy(out[2], i)

    @jit
    def mul_small(out: Any, p: Any, k: Any) -> None:
        acc = cuda.local.array((3, L), np.uint32)
        set_infinity(acc)
        bit = 62
        while bit >= 0 and not (k >> bit) & 1:
            bit -= 1
        while bit >= 0:
            double(acc, acc)
            if (k >> bit) & 1:
                add(acc, acc, p)
            bit -= 1
        copy(out, acc)

    return G1Ops(fq, set_infinity, is_infinity, copy, double, add, add_affine, mul_small)
