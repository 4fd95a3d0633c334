"""The libraries' curve adapters: points, MSM over points, pairing and FFT for each curve.

BN254 runs on zksnake (arkworks underneath; its MSM holds the GIL), BLS12-381 on py-arkworks-bls12381 (its
MSM releases the GIL), with zksnake's FFT on both. They serve what is done on single points (assembly,
``verify``, the header's points, ``setup``), the libraries' arithmetic (``arithmetic/libraries.py``) and
the tests' reference. Library point objects never leave a process.

A section's points are built by writing its rows straight into library point objects (``_rawpoints``,
0.4 µs a point) once this process has checked that the library's layout is the one expected; otherwise
through the validating constructors (zksnake's: 117 µs a BN254 G1 point, 356 µs a G2 one, measured).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ._rawpoints import RawWriter
from .curves import BLS12381, BN128, Curve
from .field import FieldVector, to_ints
from .points import G1, G2, BadPoint, mont_row, on_curve_g1, on_curve_g2, plain_coordinates

__all__ = ["Library", "Point", "library"]

Point = Any  # a library point object: zksnake PointG1/PointG2 or py_arkworks_bls12381 G1Point/G2Point


class Library:
    """One curve's library calls. Subclasses fill them in."""

    curve: Curve
    g1_gen: G1
    g2_gen: G2

    def __init__(self) -> None:
        self._writers: dict[int, RawWriter | None] = {}
        self._reasons: dict[int, str | None] = {}

    # -- points -------------------------------------------------------------------------------------------
    def g1(self, xy: G1, *, trusted: bool = False) -> Point:
        """A library G1 point; raises ValueError when ``xy`` is not on the curve."""
        raise NotImplementedError

    def g2(self, xy: G2, *, trusted: bool = False) -> Point:
        """A library G2 point; raises ValueError when ``xy`` is not in G2."""
        raise NotImplementedError

    def g1_xy(self, point: Point) -> G1:
        """Affine coordinates of a library G1 point."""
        raise NotImplementedError

    def g2_xy(self, point: Point) -> G2:
        """Affine coordinates of a library G2 point."""
        raise NotImplementedError

    def points(self, rows: NDArray[np.uint8], group: int) -> list[Point]:
        """Library points for rows of Montgomery-form coordinates, none of them at infinity, and all on the
        curve when written raw (no validation then: the caller checked them); otherwise built by the
        validating constructors (BadPoint names the first bad row)."""
        writer = self.writer(group)
        if writer is not None:
            return writer.build(rows)
        make = self.g1 if group == 1 else self.g2
        points = []
        for i, coords in enumerate(plain_coordinates(self.curve, rows)):
            try:
                points.append(make(coords))  # type: ignore[arg-type]
            except ValueError:
                raise BadPoint(i, f"is not a point of G{group}") from None
        return points

    def writer(self, group: int) -> RawWriter | None:
        """This process's raw writer for ``group``, or None when its self-check failed (see ``loader``)."""
        if group not in self._writers:
            writer = self._raw_writer(group)
            try:
                reason = self._self_check(writer, group)
            except Exception as exc:  # any surprise from the library means: do not write raw
                reason = f"{type(exc).__name__}: {exc}"
            self._writers[group] = writer if reason is None else None
            self._reasons[group] = reason
        return self._writers[group]

    def loader(self, group: int) -> str:
        """How this process builds points of ``group``: "raw", or "checked (why raw is not used)"."""
        self.writer(group)
        reason = self._reasons[group]
        return "raw" if reason is None else f"checked ({reason})"

    def _self_check(self, writer: RawWriter, group: int) -> str | None:
        gen = self.g1(self.g1_gen) if group == 1 else self.g2(self.g2_gen)
        xy = self.g1_xy if group == 1 else self.g2_xy
        ks = [2, 3, 5, 0x1234567, self.curve.r - 2]
        checked = [self.mul(gen, k) for k in ks]
        rows = np.stack([mont_row(self.curve, xy(p)) for p in checked])
        one = (1 << (8 * self.curve.n8q)) % self.curve.q
        z = (one,) if group == 1 else (one, 0)
        template = mont_row(self.curve, xy(gen)).tobytes() + b"".join(
            c.to_bytes(self.curve.n8q, "little") for c in z
        )
        return writer.self_check(checked, rows, template, lambda pts, ks: self.msm(pts, _fv(ks), group))

    def _raw_writer(self, group: int) -> RawWriter:
        raise NotImplementedError

    def in_subgroup(self, point: Point, group: int) -> bool:
        """Whether ``point`` (on the curve) lies in the subgroup of order r."""
        raise NotImplementedError

    def first_outside_subgroup(self, points: Sequence[Point], group: int) -> int | None:
        """Index of the first of ``points`` outside the subgroup of order r, testing each, or None."""
        for i, p in enumerate(points):
            if not self.in_subgroup(p, group):
                return i
        return None

    # -- arithmetic ---------------------------------------------------------------------------------------
    def msm(self, points: Sequence[Point], scalars: FieldVector, group: int) -> Point:
        """Sum of ``scalars[i] * points[i]`` (scalars canonical)."""
        raise NotImplementedError

    def mul(self, point: Point, k: int) -> Point:
        """``k * point``."""
        raise NotImplementedError

    def pairing_check(self, g1s: Sequence[Point], g2s: Sequence[Point]) -> bool:
        """Whether the product of ``e(g1s[i], g2s[i])`` is one."""
        raise NotImplementedError

    # -- polynomials --------------------------------------------------------------------------------------
    def fft(self, values: list[int], n: int) -> list[int]:
        """Evaluations at the zksnake root's powers."""
        raise NotImplementedError

    def ifft(self, values: list[int], n: int) -> list[int]:
        """Inverse of ``fft``."""
        raise NotImplementedError


def _fv(ints: Sequence[int]) -> FieldVector:
    return np.frombuffer(b"".join(k.to_bytes(32, "little") for k in ints), dtype="<u8").reshape(-1, 4)


class _BN254(Library):
    def __init__(self) -> None:
        from zksnake._algebra import ec_bn254, polynomial_bn254

        super().__init__()
        self.curve = BN128
        self._ec, self._poly = ec_bn254, polynomial_bn254
        self.g1_gen = (1, 2)
        g2 = ec_bn254.g2()
        self.g2_gen = (g2.x[0], g2.x[1], g2.y[0], g2.y[1])

    def g1(self, xy: G1, *, trusted: bool = False) -> Point:
        if xy == (0, 0):
            return self._ec.PointG1.identity()
        if not trusted and not on_curve_g1(self.curve, xy):
            raise ValueError("not a point of G1")
        return self._ec.PointG1(*xy)

    def g2(self, xy: G2, *, trusted: bool = False) -> Point:
        if xy == (0, 0, 0, 0):
            return self._ec.g2() * 0
        if not trusted and not on_curve_g2(self.curve, xy):
            raise ValueError("not a point of G2")
        try:
            return self._ec.PointG2(*xy)
        except BaseException as exc:  # the library panics (a BaseException) on points outside G2
            if type(exc).__name__ == "PanicException":
                raise ValueError("not a point of G2") from None
            raise

    def _raw_writer(self, group: int) -> RawWriter:
        return RawWriter(self._ec.g1 if group == 1 else self._ec.g2, self.curve.n8q, group)

    def in_subgroup(self, point: Point, group: int) -> bool:
        if group == 1:
            return True  # BN254 G1 has cofactor 1: on the curve is in the group
        # (r - 1)·P + P: the library reduces a scalar r itself to zero. Its arithmetic is the group law of
        # the whole twist, also outside G2 (tests/groth16/test_subgroup.py checks it against plain Python).
        return bool((point * (self.curve.r - 1) + point).is_zero())

    def g1_xy(self, point: Point) -> G1:
        return (0, 0) if point.is_zero() else (int(point.x), int(point.y))

    def g2_xy(self, point: Point) -> G2:
        if point.is_zero():
            return (0, 0, 0, 0)
        return (int(point.x[0]), int(point.x[1]), int(point.y[0]), int(point.y[1]))

    def msm(self, points: Sequence[Point], scalars: FieldVector, group: int) -> Point:
        ints = to_ints(scalars)
        if group == 1:
            return self._ec.multiscalar_mul_g1(list(points), ints)
        return self._ec.multiscalar_mul_g2(list(points), ints)

    def mul(self, point: Point, k: int) -> Point:
        return point * (k % self.curve.r)

    def pairing_check(self, g1s: Sequence[Point], g2s: Sequence[Point]) -> bool:
        # e(-g1s[0], g2s[0]) * prod(rest) == 1  <=>  e(g1s[0], g2s[0]) == prod(rest) after negating back.
        lhs = self._ec.pairing(-g1s[0], g2s[0])
        rhs = self._ec.multi_pairing(list(g1s[1:]), list(g2s[1:]))
        return bool(lhs == rhs)

    def fft(self, values: list[int], n: int) -> list[int]:
        return list(self._poly.fft(values, n))

    def ifft(self, values: list[int], n: int) -> list[int]:
        return list(self._poly.ifft(values, n))


class _BLS12381(Library):
    def __init__(self) -> None:
        import py_arkworks_bls12381 as ark
        from zksnake._algebra import polynomial_bls12_381

        super().__init__()
        self.curve = BLS12381
        self._ark, self._poly = ark, polynomial_bls12_381
        self.g1_gen = self.g1_xy(ark.G1Point())
        self.g2_gen = self.g2_xy(ark.G2Point())

    def _bytes(self, coords: Sequence[int]) -> bytes:
        return b"".join(c.to_bytes(48, "little") for c in coords)

    def g1(self, xy: G1, *, trusted: bool = False) -> Point:
        if trusted:
            return self._ark.G1Point.from_xy_bytes_unchecked_le(self._bytes(xy))
        if xy != (0, 0) and not on_curve_g1(self.curve, xy):
            raise ValueError("not a point of G1")
        try:
            return self._ark.G1Point.from_xy_bytes_le(self._bytes(xy))
        except Exception:
            raise ValueError("not a point of G1") from None

    def g2(self, xy: G2, *, trusted: bool = False) -> Point:
        if trusted:
            return self._ark.G2Point.from_xy_bytes_unchecked_le(self._bytes(xy))
        if xy != (0, 0, 0, 0) and not on_curve_g2(self.curve, xy):
            raise ValueError("not a point of G2")
        try:
            return self._ark.G2Point.from_xy_bytes_le(self._bytes(xy))
        except Exception:
            raise ValueError("not a point of G2") from None

    def g1_xy(self, point: Point) -> G1:
        raw = point.to_xy_bytes_le()
        return (int.from_bytes(raw[:48], "little"), int.from_bytes(raw[48:96], "little"))

    def g2_xy(self, point: Point) -> G2:
        raw = point.to_xy_bytes_le()
        c = [int.from_bytes(raw[48 * k : 48 * (k + 1)], "little") for k in range(4)]
        return (c[0], c[1], c[2], c[3])

    def _raw_writer(self, group: int) -> RawWriter:
        return RawWriter(self._ark.G1Point if group == 1 else self._ark.G2Point, self.curve.n8q, group)

    def in_subgroup(self, point: Point, group: int) -> bool:
        return bool(point.is_in_subgroup())

    def msm(self, points: Sequence[Point], scalars: FieldVector, group: int) -> Point:
        raw = np.ascontiguousarray(scalars, dtype="<u8").tobytes()
        make = self._ark.Scalar.from_le_bytes_mod_order
        ks = [make(raw[i : i + 32]) for i in range(0, len(raw), 32)]
        cls = self._ark.G1Point if group == 1 else self._ark.G2Point
        if not ks:
            return cls.identity()
        return cls.multiexp_unchecked(list(points), ks)

    def mul(self, point: Point, k: int) -> Point:
        return point * self._ark.Scalar(k % self.curve.r)

    def pairing_check(self, g1s: Sequence[Point], g2s: Sequence[Point]) -> bool:
        return bool(self._ark.GT.pairing_check(list(g1s), list(g2s)))

    def fft(self, values: list[int], n: int) -> list[int]:
        return list(self._poly.fft(values, n))

    def ifft(self, values: list[int], n: int) -> list[int]:
        return list(self._poly.ifft(values, n))


_LIBRARIES: dict[str, Library] = {}


def library(curve: Curve) -> Library:
    """The (process-wide, lazily built) library adapter of ``curve``."""
    found = _LIBRARIES.get(curve.name)
    if found is None:
        found = _BN254() if curve.name == BN128.name else _BLS12381()
        _LIBRARIES[curve.name] = found
    return found
