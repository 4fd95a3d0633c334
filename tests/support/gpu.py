"""What the cuda tests share: the skip without numba-cuda, the ``gpu`` mark, random points and the key's
row layout.

Without a visible NVIDIA driver the kernels run in numba's CUDA simulator (conftest sets
``NUMBA_ENABLE_CUDASIM=1``), slowly, so those tests stay at a few points; the ``gpu`` mark's need a GPU.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

pytest.importorskip("numba.cuda", reason="numba-cuda is not installed: pip install 'prooflane[cuda]'")

from prooflane.groth16 import Curve
from prooflane.groth16.adapters import library
from prooflane.groth16.cuda import gpu_available, unavailable_reason
from prooflane.groth16.points import G1

REASON = unavailable_reason()
gpu = pytest.mark.skipif(not gpu_available(), reason=f"needs an NVIDIA GPU: {REASON or 'simulator only'}")


def random_points(curve: Curve, count: int, rng: random.Random) -> list[G1]:
    """``count`` random points of G1 (affine), none at infinity."""
    be = library(curve)
    gen = be.g1(be.g1_gen)
    return [be.g1_xy(be.mul(gen, rng.randrange(1, curve.r))) for _ in range(count)]


def rows(curve: Curve, points: list[G1]) -> Any:
    """The key's row layout of ``points``: Montgomery-form little-endian x then y, ``n8q`` bytes each (all
    zero for the point at infinity)."""
    import numpy as np

    from prooflane.groth16.points import mont_row

    n8 = curve.n8q
    out = np.zeros((len(points), 2 * n8), dtype=np.uint8)
    for i, point in enumerate(points):
        if point != (0, 0):
            out[i] = mont_row(curve, point)
    return out


def cpu_msm(curve: Curve, points: list[G1], scalars: list[int]) -> G1:
    """The cpu primitive's MSM (skipping points at infinity, as the prover does)."""
    from prooflane.groth16 import from_ints

    be = library(curve)
    keep = [i for i, p in enumerate(points) if p != (0, 0)]
    if not keep:
        return (0, 0)
    total = be.msm([be.g1(points[i]) for i in keep], from_ints([scalars[i] for i in keep]), 1)
    return be.g1_xy(total)
