"""Points as they cross prooflane's boundaries: affine integer tuples, or rows of a .zkey's bytes.

``G1 = (x, y)`` and ``G2 = (x0, x1, y0, y1)`` (``x = x0 + x1·u``), the point at infinity all zeros. A row
holds the same coordinates little-endian in Montgomery form (``x·2^(8·n8q) mod q``), as a .zkey stores
them; a row of zeros is the point at infinity. Library point objects never leave a process.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from .curves import Curve

__all__ = [
    "CURVE_B",
    "G1",
    "G2",
    "TWIST_B",
    "BadPoint",
    "mont_row",
    "on_curve_g1",
    "on_curve_g2",
    "plain_coordinates",
]

G1 = tuple[int, int]
G2 = tuple[int, int, int, int]


class BadPoint(ValueError):
    """Raised when a row of a base section is not a point of its group: ``index`` is its row among the rows
    given, ``problem`` says what is wrong ("is not on the curve", "is not in the subgroup ...")."""

    def __init__(self, index: int, problem: str) -> None:
        super().__init__(f"point {index} {problem}")
        self.index, self.problem = index, problem


CURVE_B = {"bn128": 3, "bls12381": 4}
"""``b`` of G1's equation ``y^2 = x^3 + b``."""
TWIST_B = {
    # BN254's twist: y^2 = x^3 + 3 / (9 + u) over Fq2 = Fq[u] / (u^2 + 1).
    "bn128": (
        19485874751759354771024239261021720505790618469301721065564631296452457478373,
        266929791119991161246907387137283842545076965332900288569378510910307636690,
    ),
    "bls12381": (4, 4),
}
"""``b'`` of G2's equation over Fq2, as ``(c0, c1)``."""


def on_curve_g1(curve: Curve, xy: G1) -> bool:
    """Whether ``xy`` has coordinates below q and satisfies G1's equation (infinity is not checked here)."""
    x, y = xy
    q = curve.q
    return 0 <= x < q and 0 <= y < q and (y * y - x * x * x - CURVE_B[curve.name]) % q == 0


def _fq2_mul(a: tuple[int, int], b: tuple[int, int], q: int) -> tuple[int, int]:
    return ((a[0] * b[0] - a[1] * b[1]) % q, (a[0] * b[1] + a[1] * b[0]) % q)


def on_curve_g2(curve: Curve, xy: G2) -> bool:
    """Whether ``xy`` has coordinates below q and satisfies the twist's equation."""
    q, b = curve.q, TWIST_B[curve.name]
    if not all(0 <= c < q for c in xy):
        return False
    x, y = (xy[0], xy[1]), (xy[2], xy[3])
    x3 = _fq2_mul(_fq2_mul(x, x, q), x, q)
    return _fq2_mul(y, y, q) == ((x3[0] + b[0]) % q, (x3[1] + b[1]) % q)


def mont_row(curve: Curve, coords: Sequence[int]) -> NDArray[np.uint8]:
    """One row of Montgomery-form little-endian coordinates (the .zkey layout) for plain ``coords``."""
    n8, q = curve.n8q, curve.q
    r_mod = pow(2, 8 * n8, q)
    raw = b"".join((c * r_mod % q).to_bytes(n8, "little") for c in coords)
    return np.frombuffer(raw, dtype=np.uint8).copy()


def plain_coordinates(curve: Curve, rows: NDArray[np.uint8]) -> list[tuple[int, ...]]:
    """The plain coordinates of rows of Montgomery-form coordinates."""
    n8, q = curve.n8q, curve.q
    r_inv = pow(pow(2, 8 * n8, q), -1, q)
    raw, width, frm = np.ascontiguousarray(rows).tobytes(), rows.shape[1], int.from_bytes
    return [
        tuple(frm(raw[i + k : i + k + n8], "little") * r_inv % q for k in range(0, width, n8))
        for i in range(0, len(raw), width)
    ]
