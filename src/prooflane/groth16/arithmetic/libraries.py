"""The libraries' arithmetic: the prover over library point objects (``adapters``), where the C extension
is not built or ``PROOFLANE_NATIVE=0``. One core; every value a Python int or a library object.

A section's rows are checked on the curve by ``first_off_curve`` (vectorised over numpy arrays of Python
ints, about 2 µs a BN254 G1 point), then written into point objects raw (``adapters.Library.points``), then
tested for the subgroup where the group has a cofactor: BN254 G2 by random linear combinations over the
library's MSM (``_pointcheck.all_in_subgroup``), BLS12-381 per point. The NTT is zksnake's FFT, whose
primitive root may be another power of snarkjs' (``_plan`` finds which and permutes).
"""

from __future__ import annotations

from functools import cache

import numpy as np
from numpy.typing import NDArray

from .. import _pointcheck
from ..adapters import Library, library
from ..curves import BN128, Curve
from ..errors import InvalidWitnessError
from ..field import FieldVector, from_ints, to_ints
from ..points import CURVE_B, G1, G2, TWIST_B, BadPoint
from ..roots import root_of_unity
from ..witness import Witness
from .base import Arithmetic, Section

__all__ = ["LibraryArithmetic", "first_off_curve"]


class LibraryArithmetic(Arithmetic):
    name = "libraries"

    def __init__(self, curve: Curve, why: str) -> None:
        super().__init__(curve, why)
        self.lib: Library = library(curve)

    def coefficients(self, values: bytes) -> bytes:
        r, frm = self.curve.r, int.from_bytes
        factor = pow(2**512, -1, r)
        seen: dict[bytes, bytes] = {}  # a circuit's coefficients repeat (1, -1, its constants)

        def convert(value: bytes) -> bytes:
            plain = seen[value] = (frm(value, "little") * factor % r).to_bytes(32, "little")
            return plain

        return b"".join(
            seen.get(value) or convert(value)
            for value in (values[i : i + 32] for i in range(0, len(values), 32))
        )

    def synthesize(
        self,
        matrix: NDArray[np.uint32],
        rows: NDArray[np.int64],
        wires: NDArray[np.int64],
        values: FieldVector,
        witness: Witness,
        n_rows: int,
    ) -> tuple[FieldVector, FieldVector, FieldVector]:
        r = self.curve.r
        w = np.array(to_ints(witness.values), dtype=object)
        if w.size and max(w) >= r:
            raise InvalidWitnessError("invalid witness: a value is not below the field")
        coef = np.array(to_ints(values), dtype=object)
        a, b = (
            matvec(rows[matrix == k], wires[matrix == k], coef[matrix == k], w, n_rows) % r for k in (0, 1)
        )
        return from_ints(a.tolist()), from_ints(b.tolist()), from_ints((a * b % r).tolist())

    def coset_h(self, a: FieldVector, b: FieldVector, c: FieldVector, n: int, threads: int) -> FieldVector:
        r = self.curve.r
        perm, powers = _plan(self.lib, n)
        order = None if bool((perm == np.arange(n)).all()) else perm.tolist()
        on_a, on_b, on_c = (_on_coset(self.lib, vec, n, order, powers) for vec in (a, b, c))
        return from_ints([(x * y - z) % r for x, y, z in zip(on_a, on_b, on_c, strict=True)])

    def section(self, rows: NDArray[np.uint8], group: int, *, checked: bool) -> Section:
        index = np.flatnonzero(rows.any(axis=1))
        picked = rows[index]
        if not checked:
            off = first_off_curve(self.curve, picked, group)
            if off is not None:
                raise BadPoint(int(index[off]), "is not on the curve")
        try:
            points = self.lib.points(picked, group)
        except BadPoint as bad:  # the validating constructors (where raw writing is not safe here)
            raise BadPoint(int(index[bad.index]), bad.problem) from None
        if not checked:
            outside = self._first_outside_subgroup(points, group)
            if outside is not None:
                raise BadPoint(int(index[outside]), f"is not in the subgroup of order r of G{group}")
        return Section(group, rows, points, index)

    def msm(self, section: Section, scalars: FieldVector, threads: int) -> G1 | G2:
        picked = scalars[section.index]
        keep = np.flatnonzero(picked.any(axis=1))
        points = section.points
        if keep.size != len(points):
            points = [points[i] for i in keep.tolist()]
        point = self.lib.msm(points, picked[keep], section.group)
        return self.lib.g1_xy(point) if section.group == 1 else self.lib.g2_xy(point)

    def _first_outside_subgroup(self, points: list[object], group: int) -> int | None:
        if group == 1 and self.curve == BN128:
            return None  # BN254 G1 has cofactor 1: on the curve is in the group
        if self.curve == BN128:
            msm = self.lib.msm

            def combine(pts: object, ks: FieldVector) -> object:
                return msm(points, ks, 2)

            smallest = _pointcheck.BN254_G2_COFACTOR_PRIMES[0]
            if _pointcheck.all_in_subgroup(points, combine, lambda s: self.lib.in_subgroup(s, 2), smallest):
                return None
        return self.lib.first_outside_subgroup(points, group)  # a refusal names the first bad point


def matvec(
    rows: NDArray[np.int64],
    cols: NDArray[np.int64],
    values: NDArray[np.object_],
    w: NDArray[np.object_],
    n: int,
) -> NDArray[np.object_]:
    """``Σ values[k]·w[cols[k]]`` into row ``rows[k]``, over Python ints (not reduced)."""
    acc = np.zeros(n, dtype=object)
    np.add.at(acc, rows, values * w[cols])
    return acc


def first_off_curve(curve: Curve, rows: NDArray[np.uint8], group: int) -> int | None:
    """Index of the first row (Montgomery coordinates, none all zero) not on the curve, or None: the curve's
    equation checked as ``Y^2·R = X^3 + b·R^3 (mod q)`` on the rows as they are, every coordinate below q."""
    n8, q = curve.n8q, curve.q
    coords = _coordinates(rows, n8, 2 * group)
    too_big = np.flatnonzero(np.logical_or.reduce([(c >= q).astype(bool) for c in coords]))
    if too_big.size:
        return int(too_big[0])
    r_mod = pow(2, 8 * n8, q)
    if group == 1:
        x, y = coords
        residue = (y * y * r_mod - x * x * x - CURVE_B[curve.name] * r_mod**3) % q  # one reduction: fastest
        bad = np.flatnonzero(residue != 0)
    else:
        x0, x1, y0, y1 = coords
        b0, b1 = (c * r_mod**3 % q for c in TWIST_B[curve.name])
        sq0, sq1 = (x0 + x1) * (x0 - x1) % q, 2 * x0 * x1 % q  # x^2
        res0 = (y0 + y1) * (y0 - y1) % q * r_mod - (sq0 * x0 - sq1 * x1) - b0
        res1 = 2 * y0 * y1 % q * r_mod - (sq0 * x1 + sq1 * x0) - b1
        bad = np.flatnonzero((res0 % q != 0) | (res1 % q != 0))
    return int(bad[0]) if bad.size else None


def _coordinates(rows: NDArray[np.uint8], n8: int, count: int) -> list[NDArray[np.object_]]:
    """The rows' ``count`` coordinates as arrays of Python ints."""
    raw, width, frm = np.ascontiguousarray(rows).tobytes(), rows.shape[1], int.from_bytes
    return [
        np.array(
            [frm(raw[i + k * n8 : i + (k + 1) * n8], "little") for i in range(0, len(raw), width)], object
        )
        for k in range(count)
    ]


@cache
def _plan(lib: Library, n: int) -> tuple[NDArray[np.int64], list[int]]:
    """(permutation from zksnake's order to snarkjs', powers of the coset shift ``w_2n``)."""
    r = lib.curve.r
    w_s = root_of_unity(r, n)
    w_z = lib.fft([0, 1] + [0] * (n - 2), n)[1] if n > 1 else 1
    log_n = n.bit_length() - 1
    k = 0  # Pohlig-Hellman in a group of order 2^log_n: w_z = w_s^k
    inv = pow(w_s, -1, r)
    for i in range(log_n):
        if pow(w_z * pow(inv, k, r) % r, 1 << (log_n - i - 1), r) != 1:
            k += 1 << i
    perm = (np.arange(n, dtype=np.int64) * k) % n
    shift = root_of_unity(r, 2 * n)
    powers = [1] * n
    for i in range(1, n):
        powers[i] = powers[i - 1] * shift % r
    return perm, powers


def _on_coset(
    lib: Library, vec: FieldVector, n: int, order: list[int] | None, powers: list[int]
) -> list[int]:
    """The values of one vector's polynomial on the odd coset. Each step drops the list before it, so that at
    most two lists of ``n`` ints are alive (at 2^20 each is about 70 MB of Python ints)."""
    r = lib.curve.r
    values = to_ints(vec)
    values.extend([0] * (n - len(values)))
    if order is not None:
        values = [values[i] for i in order]
    coeffs = lib.ifft(values, n)
    del values
    coeffs = [x * p % r for x, p in zip(coeffs, powers, strict=True)]
    evals = lib.fft(coeffs, n)
    del coeffs
    if order is not None:
        ordered = [0] * n
        for j, i in enumerate(order):
            ordered[i] = evals[j]
        evals = ordered
    return evals
