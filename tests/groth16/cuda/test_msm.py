"""The cuda G1 MSM (Pippenger's bucket method) against the cpu primitive: its parts (the cutting of
buckets into runs, the bucket reduction) and whole MSMs on random and awkward inputs. In numba's CUDA
simulator when no GPU is visible (a few points: the simulator runs every field operation in Python);
at 2^4 to 2^16 points on a GPU (the benchmark compares 2^16 to 2^22)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from prooflane.groth16 import BLS12381, BN128, Curve, from_ints
from prooflane.groth16.adapters import library
from prooflane.groth16.cuda._field import field
from prooflane.groth16.cuda._msm import _runs, default_slices, default_window, msm_kernels
from prooflane.groth16.cuda._runtime import cuda as numba_cuda
from prooflane.groth16.points import G1
from tests.support.gpu import cpu_msm, gpu, random_points, rows

cuda: Any = numba_cuda()
CURVES = [pytest.param(BN128, id="bn128"), pytest.param(BLS12381, id="bls12381")]


def test_runs_cut_each_bucket_into_consecutive_runs() -> None:
    start, stop, per_group = _runs(np.array([0, 5, 5, 12]), np.array([5, 0, 7, 1]), 3)
    assert per_group.tolist() == [2, 0, 3, 1]
    assert list(zip(start.tolist(), stop.tolist(), strict=True)) == [
        (0, 3), (3, 5), (5, 8), (8, 11), (11, 12), (12, 13)
    ]  # fmt: skip


def test_window_and_slices_grow_with_the_input() -> None:
    assert default_window(16) == 4 and default_window(1 << 20) == 16 and default_window(1 << 30) == 16
    assert default_slices(4) == 1 and default_slices(16) == 1024


@pytest.mark.parametrize("slices", [1, 3, 7])
def test_bucket_reduction_weighs_each_bucket_by_its_index(slices: int) -> None:
    """One window of 8 buckets (0 unused, some empty): the reduction is sum_b b * B_b."""
    rng = random.Random(slices)
    be, f, kernels = library(BN128), field(BN128.q), msm_kernels(BN128.q)
    per_window, windows = 8, 2
    points = random_points(BN128, 5, rng)
    filled = {(0, 1): points[0], (0, 4): points[1], (0, 7): points[2], (1, 2): points[3], (1, 6): points[4]}
    buckets = np.zeros((windows * per_window, 3, f.limbs), dtype=np.uint32)  # Z = 0: infinity
    for (w, b), (x, y) in filled.items():
        buckets[w * per_window + b] = f.mont([x, y, 1])
    sliced = np.zeros((windows * slices, 3, f.limbs), dtype=np.uint32)
    kernels.reduce_buckets[windows * slices, 1](buckets, per_window, slices, sliced)
    bounds = np.arange(windows, dtype=np.int64) * slices
    totals = np.zeros((windows, 3, f.limbs), dtype=np.uint32)
    kernels.sum_runs[windows, 1](sliced, bounds, bounds + slices, totals)
    for w in range(windows):
        expected = be.g1((0, 0))
        for (ww, b), point in filled.items():
            if ww == w:
                expected = expected + be.mul(be.g1(point), b)
        assert kernels._affine(totals[w]) == be.g1_xy(expected)


def _msm(curve: Curve, points: list[G1], scalars: list[int], **options: Any) -> G1:
    kernels = msm_kernels(curve.q)
    return kernels.msm(kernels.upload(rows(curve, points)), from_ints(scalars), **options)


@pytest.mark.parametrize("curve", CURVES)
def test_msm_matches_the_cpu_primitive_on_random_scalars(curve: Curve) -> None:
    """Random 64-bit scalars: every window of a full scalar costs the simulator seconds; the slow test
    below takes full ones."""
    rng = random.Random(f"msm-{curve.name}")
    points = random_points(curve, 4, rng)
    scalars = [rng.randrange(1 << 64) for _ in points]
    assert _msm(curve, points, scalars) == cpu_msm(curve, points, scalars)


def test_msm_handles_zeros_ones_infinity_and_crowded_buckets() -> None:
    """Zero scalars, bases at infinity, and six entries in one bucket cut into runs of two (so the runs
    are summed in two rounds)."""
    rng = random.Random("awkward")
    points = random_points(BN128, 8, rng)
    points[2] = (0, 0)
    scalars = [1, 1, 5, 1, 0, 1, 1, 1 << 40]
    assert _msm(BN128, points, scalars, window=4, segment=2) == cpu_msm(BN128, points, scalars)
    assert _msm(BN128, points, [0] * 8) == (0, 0)
    assert _msm(BN128, [(0, 0)] * 2, [3, 4]) == (0, 0)
    assert _msm(BN128, [], []) == (0, 0)


def test_msm_of_a_point_and_its_negation_is_infinity() -> None:
    (p,) = random_points(BN128, 1, random.Random("neg"))
    minus = (p[0], BN128.q - p[1])
    assert _msm(BN128, [p, minus], [9, 9], window=4) == (0, 0)


@pytest.mark.parametrize(
    ("curve", "n"),
    [
        pytest.param(BN128, 4, id="bn128-4"),
        pytest.param(BLS12381, 4, id="bls12381-4"),
        pytest.param(BN128, 16, id="bn128-16"),
    ],
)
def test_msm_matches_the_cpu_primitive_on_full_scalars(curve: Curve, n: int) -> None:
    rng = random.Random(n)
    points = random_points(curve, n, rng)
    scalars = [rng.randrange(curve.r) for _ in points]
    scalars[0] = curve.r - 1
    assert _msm(curve, points, scalars) == cpu_msm(curve, points, scalars)


@gpu
@pytest.mark.parametrize("curve", CURVES)
@pytest.mark.parametrize("log_n", [4, 10, 16])
def test_msm_matches_the_cpu_primitive_on_a_gpu(curve: Curve, log_n: int) -> None:
    rng = random.Random(log_n)
    be = library(curve)
    base = be.g1(be.g1_gen)
    step = be.mul(base, rng.randrange(1, curve.r))
    points, acc = [], base
    for _ in range(1 << log_n):  # distinct points cheaply: a walk by a random step
        points.append(be.g1_xy(acc))
        acc = acc + step
    scalars = [rng.randrange(curve.r) for _ in points]
    scalars[: 1 << (log_n - 2)] = [rng.randrange(2) for _ in range(1 << (log_n - 2))]  # a witness's 0s and 1s
    assert _msm(curve, points, scalars) == cpu_msm(curve, points, scalars)
