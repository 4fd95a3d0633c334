"""The cuda kernels' arithmetic: Montgomery field operations against Python ints, G1 point operations
against the cpu library (in numba's CUDA simulator when no GPU is visible)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from prooflane.groth16 import BLS12381, BN128, Curve
from prooflane.groth16.adapters import library
from prooflane.groth16.cuda._curve import g1_ops
from prooflane.groth16.cuda._field import Field, field, from_limbs, to_limbs
from prooflane.groth16.cuda._runtime import cuda as numba_cuda
from prooflane.groth16.points import G1
from tests.support.gpu import random_points

cuda: Any = numba_cuda()
CURVES = [pytest.param(BN128, id="bn128"), pytest.param(BLS12381, id="bls12381")]
PRIMES = [
    pytest.param(BN128.r, id="bn128-r"),
    pytest.param(BN128.q, id="bn128-q"),
    pytest.param(BLS12381.r, id="bls12381-r"),
    pytest.param(BLS12381.q, id="bls12381-q"),
]


def _field_kernel(f: Field) -> Any:
    mul, add, sub = f.mul, f.add, f.sub

    @cuda.jit  # type: ignore[untyped-decorator]
    def kernel(out: Any, a: Any, b: Any) -> None:
        i = cuda.grid(1)
        if i < a.shape[0]:
            mul(out[0, i], a[i], b[i])
            add(out[1, i], a[i], b[i])
            sub(out[2, i], a[i], b[i])

    return kernel


@pytest.mark.parametrize("p", PRIMES)
def test_field_operations_match_python_ints(p: int) -> None:
    rng = random.Random(p)
    f = field(p)
    edges = [0, 1, p - 1, p - 2, 2, (p - 1) // 2]
    xs = edges + [0, p - 1, 1] + [rng.randrange(p) for _ in range(23)]
    ys = edges[::-1] + [p - 1, p - 1, p - 1] + [rng.randrange(p) for _ in range(23)]
    out = np.zeros((3, len(xs), f.limbs), dtype=np.uint32)
    _field_kernel(f)[len(xs), 1](out, f.mont(xs), f.mont(ys))
    assert f.unmont(out[0]) == [x * y % p for x, y in zip(xs, ys, strict=True)]
    assert f.unmont(out[1]) == [(x + y) % p for x, y in zip(xs, ys, strict=True)]
    assert f.unmont(out[2]) == [(x - y) % p for x, y in zip(xs, ys, strict=True)]


def test_limbs_round_trip_and_layout() -> None:
    values = [0, 1, 2**32, 2**255 + 7, 2**256 - 1]
    limbs = to_limbs(values, 8)
    assert limbs[2].tolist() == [0, 1, 0, 0, 0, 0, 0, 0]
    assert from_limbs(limbs) == values
    f = field(BN128.q)
    assert f.unmont(f.mont([5, BN128.q - 1])) == [5, BN128.q - 1]
    assert f.limbs == 8 and field(BLS12381.q).limbs == 12


# -- points -----------------------------------------------------------------------------------------------


def _jacobian(f: Field, point: G1 | None, z: int) -> Any:
    """Montgomery limbs (3, L) of ``point`` with Z = z (None: infinity)."""
    q = f.p
    if point is None:
        return f.mont([1, 1, 0])
    x, y = point
    return f.mont([x * z * z % q, y * z * z * z % q, z])


def _affine(f: Field, limbs: Any) -> G1:
    x, y, z = f.unmont(limbs)
    if z == 0:
        return (0, 0)
    zi = pow(z, -1, f.p)
    return (x * zi * zi % f.p, y * zi * zi * zi % f.p)


def _point_kernel(curve: Curve) -> Any:
    ops = g1_ops(curve.q)
    double, add, add_affine, mul_small = ops.double, ops.add, ops.add_affine, ops.mul_small

    @cuda.jit  # type: ignore[untyped-decorator]
    def kernel(out: Any, p: Any, q: Any, q_affine: Any, k: Any) -> None:
        i = cuda.grid(1)
        if i < p.shape[0]:
            double(out[0, i], p[i])
            add(out[1, i], p[i], q[i])
            add_affine(out[2, i], p[i], q_affine[i])
            mul_small(out[3, i], p[i], k[i])

    return kernel


@pytest.mark.parametrize("curve", CURVES)
def test_point_operations_match_the_cpu_library(curve: Curve) -> None:
    rng = random.Random(curve.name)
    be, f = library(curve), field(curve.q)
    a, b, c, d = random_points(curve, 4, rng)
    minus_b = (b[0], curve.q - b[1])
    # (p, q) pairs: generic, p at infinity, q at infinity, p == q, p == -q
    ps: list[G1 | None] = [a, None, a, b, b, c]
    qs: list[G1 | None] = [b, c, None, b, minus_b, d]
    ks = [3, 5, 7, 2, 1, 0]
    n = len(ps)
    p_limbs = np.array([_jacobian(f, p, rng.randrange(1, curve.q)) for p in ps])
    q_limbs = np.array([_jacobian(f, q, rng.randrange(1, curve.q)) for q in qs])
    q_affine = np.array([f.mont(list(q if q is not None else d)) for q in qs])
    out = np.zeros((4, n, 3, f.limbs), dtype=np.uint32)
    _point_kernel(curve)[n, 1](out, p_limbs, q_limbs, q_affine, np.array(ks, dtype=np.int64))

    def lib(point: G1 | None) -> Any:
        return be.g1(point if point is not None else (0, 0))

    for i in range(n):
        assert _affine(f, out[0, i]) == be.g1_xy(lib(ps[i]) + lib(ps[i])), f"double {i}"
        assert _affine(f, out[1, i]) == be.g1_xy(lib(ps[i]) + lib(qs[i])), f"add {i}"
        assert _affine(f, out[2, i]) == be.g1_xy(lib(ps[i]) + lib(qs[i] or d)), f"add_affine {i}"
        assert _affine(f, out[3, i]) == be.g1_xy(be.mul(lib(ps[i]), ks[i])), f"mul_small {i}"
