"""Plain-Python curve arithmetic, slow and obvious: the reference the native libraries are checked against.

Points are affine pairs of Fq2 elements ``((x0, x1), (y0, y1))`` on ``y^2 = x^3 + b`` (a G1 point has zero
imaginary parts), ``None`` is the point at infinity. Fq2 is ``Fq[u] / (u^2 + 1)`` on both curves.
"""

from __future__ import annotations

import random

Fq2 = tuple[int, int]
Point = tuple[Fq2, Fq2] | None


def fq2_mul(a: Fq2, b: Fq2, q: int) -> Fq2:
    return ((a[0] * b[0] - a[1] * b[1]) % q, (a[0] * b[1] + a[1] * b[0]) % q)


def fq2_pow(a: Fq2, e: int, q: int) -> Fq2:
    out = (1, 0)
    while e:
        if e & 1:
            out = fq2_mul(out, a, q)
        a, e = fq2_mul(a, a, q), e >> 1
    return out


def fq2_inv(a: Fq2, q: int) -> Fq2:
    norm_inv = pow((a[0] * a[0] + a[1] * a[1]) % q, -1, q)
    return (a[0] * norm_inv % q, -a[1] * norm_inv % q)


def fq2_sqrt(a: Fq2, q: int) -> Fq2 | None:
    """A square root in Fq2 for ``q = 3 mod 4`` (Adj and Rodríguez-Henríquez, algorithm 9), or None."""
    a1 = fq2_pow(a, (q - 3) // 4, q)
    alpha = fq2_mul(fq2_mul(a1, a1, q), a, q)
    if fq2_mul(fq2_pow(alpha, q, q), alpha, q) == (q - 1, 0):
        return None
    x0 = fq2_mul(a1, a, q)
    if alpha == (q - 1, 0):
        return fq2_mul((0, 1), x0, q)
    return fq2_mul(fq2_pow(((1 + alpha[0]) % q, alpha[1]), (q - 1) // 2, q), x0, q)


def add(p: Point, r: Point, q: int) -> Point:
    if p is None:
        return r
    if r is None:
        return p
    (x1, y1), (x2, y2) = p, r
    if x1 == x2:
        if (y1[0] + y2[0]) % q == 0 and (y1[1] + y2[1]) % q == 0:
            return None
        num, den = fq2_mul((3, 0), fq2_mul(x1, x1, q), q), ((2 * y1[0]) % q, (2 * y1[1]) % q)
    else:
        num, den = ((y2[0] - y1[0]) % q, (y2[1] - y1[1]) % q), ((x2[0] - x1[0]) % q, (x2[1] - x1[1]) % q)
    slope = fq2_mul(num, fq2_inv(den, q), q)
    x3 = fq2_mul(slope, slope, q)
    x3 = ((x3[0] - x1[0] - x2[0]) % q, (x3[1] - x1[1] - x2[1]) % q)
    y3 = fq2_mul(slope, ((x1[0] - x3[0]) % q, (x1[1] - x3[1]) % q), q)
    return (x3, ((y3[0] - y1[0]) % q, (y3[1] - y1[1]) % q))


def mul(p: Point, k: int, q: int) -> Point:
    """``k·p`` by double and add, with no reduction of ``k``: the group law of the whole curve."""
    out: Point = None
    while k:
        if k & 1:
            out = add(out, p, q)
        p, k = add(p, p, q), k >> 1
    return out


def random_point(rng: random.Random, q: int, b: Fq2, *, extension: bool) -> tuple[Fq2, Fq2]:
    """A random point of ``y^2 = x^3 + b`` over Fq2 (``extension``) or Fq: almost surely outside the
    subgroup of order r when the curve's group has a large cofactor."""
    while True:
        x = (rng.randrange(q), rng.randrange(q) if extension else 0)
        rhs = fq2_mul(fq2_mul(x, x, q), x, q)
        rhs = ((rhs[0] + b[0]) % q, (rhs[1] + b[1]) % q)
        if extension:
            y = fq2_sqrt(rhs, q)
        else:
            root = pow(rhs[0], (q + 1) // 4, q)  # q = 3 mod 4
            y = (root, 0) if root * root % q == rhs[0] else None
        if y is not None:
            return (x, y)


def flat(p: tuple[Fq2, Fq2], *, extension: bool) -> tuple[int, ...]:
    """The coordinates as prooflane's affine tuples: ``(x0, x1, y0, y1)`` or ``(x, y)``."""
    return (p[0][0], p[0][1], p[1][0], p[1][1]) if extension else (p[0][0], p[1][0])
