"""The cuda NTT and quotient H against a direct evaluation and the cpu path's ``coset_h`` (in numba's CUDA
simulator at 2^0 to 2^6 when no GPU is visible; at 2^16 and 2^20 on a GPU)."""

from __future__ import annotations

import random

import pytest

from prooflane.groth16 import BLS12381, BN128, Curve, from_ints, to_ints
from prooflane.groth16.arithmetic import arithmetic
from prooflane.groth16.cuda import coset_h, ntt
from prooflane.groth16.roots import root_of_unity
from tests.support.gpu import gpu

CURVES = [pytest.param(BN128, id="bn128"), pytest.param(BLS12381, id="bls12381")]


@pytest.mark.parametrize("curve", CURVES)
def test_roots_of_unity_are_primitive_and_nested(curve: Curve) -> None:
    r = curve.r
    for n in (2, 16, 1 << 20):
        w = root_of_unity(r, n)
        assert pow(w, n, r) == 1 and pow(w, n // 2, r) == r - 1
        assert pow(root_of_unity(r, 2 * n), 2, r) == w
    assert root_of_unity(r, 1) == 1
    with pytest.raises(ValueError, match="roots of unity"):
        root_of_unity(curve.r, 3)


@pytest.mark.parametrize("curve", CURVES)
@pytest.mark.parametrize("log_n", [0, 1, 4, 6])
def test_ntt_evaluates_at_the_powers_of_the_root_and_inverts(curve: Curve, log_n: int) -> None:
    rng, r, n = random.Random(log_n), curve.r, 1 << log_n
    coefficients = [rng.randrange(r) for _ in range(n)]
    w = root_of_unity(r, n)
    expected = [sum(c * pow(w, i * j, r) for i, c in enumerate(coefficients)) % r for j in range(n)]
    evaluations = ntt(curve, from_ints(coefficients))
    assert to_ints(evaluations) == expected
    assert to_ints(ntt(curve, evaluations, inverse=True)) == coefficients


@pytest.mark.parametrize("curve", CURVES)
@pytest.mark.parametrize("log_n", [1, 4, 6])
def test_coset_h_matches_the_cpu_path(curve: Curve, log_n: int) -> None:
    rng, r, n = random.Random(f"h{log_n}"), curve.r, 1 << log_n
    rows = max(1, n - 3)  # fewer rows than the domain: the rest is padding
    a = [rng.randrange(r) for _ in range(rows)]
    b = [rng.randrange(r) for _ in range(rows)]
    c = [x * y % r for x, y in zip(a, b, strict=True)]
    c[0] = (c[0] + 1) % r  # an unsatisfied row: H is then no polynomial, and must still match
    vectors = (from_ints(a), from_ints(b), from_ints(c))
    expected = arithmetic(curve).coset_h(*vectors, n, 1)
    assert (coset_h(curve, *vectors, n) == expected).all()


@gpu
@pytest.mark.parametrize("curve", CURVES)
@pytest.mark.parametrize("log_n", [10, 16, 20])
def test_coset_h_matches_the_cpu_path_on_a_gpu(curve: Curve, log_n: int) -> None:
    rng, r, n = random.Random(log_n), curve.r, 1 << log_n
    a = from_ints([rng.randrange(r) for _ in range(n - 5)])
    b = from_ints([rng.randrange(r) for _ in range(n - 5)])
    c = from_ints([rng.randrange(r) for _ in range(n - 5)])
    assert (coset_h(curve, a, b, c, n) == arithmetic(curve).coset_h(a, b, c, n, 1)).all()
