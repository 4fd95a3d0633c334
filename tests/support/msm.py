"""MSMs as the C extension's tests build and check them: points of the libraries as a .zkey's rows, the
libraries' sum of a few terms, and the extension's plain output as coordinates."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from prooflane.groth16 import Curve
from prooflane.groth16.adapters import library
from prooflane.groth16.points import mont_row

CURVE_IDS = {"bn128": 0, "bls12381": 1}


def generator(curve: Curve, group: int) -> tuple[Any, Any]:
    """The library's generator of ``group`` and its function from a point to plain coordinates."""
    be = library(curve)
    return (be.g1(be.g1_gen), be.g1_xy) if group == 1 else (be.g2(be.g2_gen), be.g2_xy)


def library_msm(curve: Curve, group: int, points: list[Any], scalars: list[int]) -> tuple[int, ...]:
    """Sum of ``scalars[k]·points[k]`` by the library, term by term (None: the point at infinity)."""
    be = library(curve)
    _, xy = generator(curve, group)
    total = None
    for point, k in zip(points, scalars, strict=True):
        if point is None or k % curve.r == 0:
            continue
        term = be.mul(point, k)
        total = term if total is None else total + term
    return tuple(xy(total)) if total is not None else (0,) * (2 * group)


def rows_of(curve: Curve, group: int, points: list[Any]) -> NDArray[np.uint8]:
    """The points as a .zkey's rows (Montgomery affine; None: zeros, infinity)."""
    _, xy = generator(curve, group)
    width = 2 * group * curve.n8q
    out = np.zeros((len(points), width), dtype=np.uint8)
    for i, point in enumerate(points):
        if point is not None:
            out[i] = mont_row(curve, xy(point))
    return out


def coords(curve: Curve, raw: bytes) -> tuple[int, ...]:
    """The extension's plain little-endian output as coordinates."""
    n8 = curve.n8q
    return tuple(int.from_bytes(raw[i : i + n8], "little") for i in range(0, len(raw), n8))
