"""Adapters over the native primitives: point construction, MSM, pairing and FFT for each curve.

prooflane's own C extension (``_curvemath``, built from ``csrc/`` when prooflane is installed) computes
over a key's rows as they lie in the file: the MSMs (Pippenger over batch-affine buckets, every core;
BN254 always, BLS12-381 where the CPU has mulx/adx, whose 6-limb products beat py-arkworks-bls12381's and
the portable C's do not), the quotient's NTT and the synthesis of A·w and B·w on both curves, and the
on-curve check of every row. Where it is not built (no compiler at install time) or ``PROOFLANE_NATIVE=0``,
everything runs on the libraries as before.

BN254's points and pairing run on zksnake (arkworks underneath; its MSM holds the GIL). BLS12-381 runs on
py-arkworks-bls12381 for points, pairing and (without the extension's MSM) MSM, which releases the GIL, and
zksnake for the FFT.
Points cross prooflane's boundaries as affine integer tuples (``G1 = (x, y)``, ``G2 = (x0, x1, y0, y1)``,
the point at infinity all zeros) or as rows of little-endian Montgomery-form coordinate bytes (a .zkey's
own); library point objects never leave a process.

A key's bases are built by writing those rows straight into library point objects (``_rawpoints``) once
this process has checked that the library's layout is the one expected; otherwise, and for single points,
through the libraries' validating constructors.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ._pointcheck import BN254_G2_COFACTOR_PRIMES, all_in_subgroup
from ._rawpoints import RawWriter
from .curves import BLS12381, BN128, Curve
from .field import FieldVector, to_ints

_curvemath: Any
try:  # by name: the extension has no stubs, and importing it through the package would make a cycle
    _curvemath = importlib.import_module(f"{__package__}._curvemath")
except ImportError:  # not built: the libraries do everything
    _curvemath = None

__all__ = [
    "G1",
    "G2",
    "NATIVE_ENV",
    "THREADS_ENV",
    "Backend",
    "arithmetics",
    "backend",
    "cpu_threads",
    "mont_row",
    "native_built",
]

NATIVE_ENV = "PROOFLANE_NATIVE"
"""``PROOFLANE_NATIVE=0`` leaves the C extension unused (read when a process first builds a backend)."""
THREADS_ENV = "PROOFLANE_THREADS"
"""``PROOFLANE_THREADS=N``: the C extension's threads a call by default (see :func:`cpu_threads`)."""

G1 = tuple[int, int]
G2 = tuple[int, int, int, int]
Point = Any  # a library point object: zksnake PointG1/PointG2 or py_arkworks_bls12381 G1Point/G2Point


def native_built() -> bool:
    """Whether the C extension is built and not switched off by ``PROOFLANE_NATIVE=0``."""
    return _curvemath is not None and os.environ.get(NATIVE_ENV, "1") != "0"


def arithmetics() -> dict[str, str]:
    """Which arithmetic proves on each curve in this process: "c-extension", or "libraries: <why>"."""
    return {be.curve.name: be.arithmetic for be in (backend(BN128), backend(BLS12381))}


def cpu_threads() -> int:
    """The C extension's threads a call unless told: ``PROOFLANE_THREADS`` where set (a daemon started with
    it passes it to its workers), else the cores this process may run on (its CPU affinity)."""
    given = os.environ.get(THREADS_ENV, "")
    if given.isdigit() and int(given) > 0:
        return int(given)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


_CURVE_IDS = {BN128.name: 0, BLS12381.name: 1}


class Backend:
    """One curve's primitives. Subclasses fill in the library calls.

    ``native`` (the C extension is used for the NTT, synthesis and on-curve checks) and ``native_msm``
    (also for the MSMs, over the key's rows: no library points are built) are fixed when the backend is
    made."""

    curve: Curve
    g1_gen: G1
    g2_gen: G2
    native_msm_curve = False  # whether the C extension's MSM is this curve's fastest

    def __init__(self) -> None:
        self._writers: dict[int, RawWriter | None] = {}
        self._reasons: dict[int, str | None] = {}
        self.native = native_built()
        self.native_msm = self.native and self.native_msm_curve

    @property
    def arithmetic(self) -> str:
        """ "c-extension" where the C extension proves this curve, else "libraries: <why>"."""
        if self.native_msm:
            return "c-extension"
        if _curvemath is None:
            return "libraries: the C extension is not built"
        if not self.native:
            return f"libraries: {NATIVE_ENV}=0"
        return "libraries: the C extension's MSM is slower here (no mulx/adx)"

    # -- the C extension ----------------------------------------------------------------------------------
    def msm_rows(self, rows: NDArray[np.uint8], scalars: FieldVector, group: int, threads: int) -> G1 | G2:
        """Sum of ``scalars[i]`` times the point of ``rows[i]`` (Montgomery-form rows, all zero: infinity),
        in plain affine coordinates, on ``threads`` threads (the GIL released)."""
        assert _curvemath is not None
        raw = _curvemath.msm(
            _CURVE_IDS[self.curve.name],
            group,
            np.ascontiguousarray(rows, dtype=np.uint8),
            np.ascontiguousarray(scalars, dtype="<u8"),
            threads,
        )
        n8 = self.curve.n8q
        coords = tuple(int.from_bytes(raw[i : i + n8], "little") for i in range(0, len(raw), n8))
        return coords  # type: ignore[return-value]

    def first_off_curve_rows(self, rows: NDArray[np.uint8], group: int) -> int | None:
        """Index of the first row not on the curve (a coordinate not below q, or the equation fails; rows
        all zero are the point at infinity and pass), or None."""
        assert _curvemath is not None
        found = _curvemath.first_off_curve(
            _CURVE_IDS[self.curve.name], group, np.ascontiguousarray(rows, dtype=np.uint8)
        )
        return None if found < 0 else int(found)

    def rows_outside_subgroup(
        self, rows: NDArray[np.uint8], group: int, rounds: int | None = None
    ) -> int | None:
        """Index of the first row (on the curve, not all zero) outside the subgroup of order r, or None;
        by default through library points built for the test only."""
        index = np.flatnonzero(rows.any(axis=1))
        outside = self.outside_subgroup(self.bases(rows[index], group), group, rounds)
        return None if outside is None else int(index[outside])

    def from_montgomery(self, values: bytes, times: int) -> bytes:
        """Scalar-field values (32 bytes each, any below 2^256) times ``R^-times`` mod r."""
        assert _curvemath is not None
        raw: bytes = _curvemath.from_montgomery(_CURVE_IDS[self.curve.name], values, times)
        return raw

    def synthesize_rows(
        self,
        matrix: NDArray[np.uint32],
        rows: NDArray[np.int64],
        wires: NDArray[np.int64],
        values: FieldVector,
        witness: FieldVector,
        n_rows: int,
    ) -> tuple[FieldVector, FieldVector, FieldVector]:
        """``A·w``, ``B·w`` and their product over ``n_rows`` rows, from a key's terms (plain values);
        ValueError when a witness value is not below r or a term lies outside the rows or wires."""
        assert _curvemath is not None
        raw = _curvemath.synthesize(
            _CURVE_IDS[self.curve.name],
            np.ascontiguousarray(matrix, dtype="<u4"),
            np.ascontiguousarray(rows, dtype="<i8"),
            np.ascontiguousarray(wires, dtype="<i8"),
            np.ascontiguousarray(values, dtype="<u8"),
            np.ascontiguousarray(witness, dtype="<u8"),
            n_rows,
        )
        out = np.frombuffer(raw, dtype="<u8").reshape(3, n_rows, 4)
        return out[0], out[1], out[2]

    def coset_h_native(
        self, a: FieldVector, b: FieldVector, c: FieldVector, n: int, roots: bytes, threads: int
    ) -> FieldVector:
        """``a*b - c`` on the odd coset (see ``_ntt.coset_h``); ``roots``: ``w_n``, ``w_2n`` and ``1/n``."""
        assert _curvemath is not None
        raw = _curvemath.coset_h(
            _CURVE_IDS[self.curve.name],
            np.ascontiguousarray(a, dtype="<u8"),
            np.ascontiguousarray(b, dtype="<u8"),
            np.ascontiguousarray(c, dtype="<u8"),
            n,
            roots,
            threads,
        )
        return np.frombuffer(raw, dtype="<u8").reshape(n, 4)

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

    def bases(self, rows: NDArray[np.uint8], group: int) -> list[Point]:
        """Library points for rows of Montgomery-form coordinates, none of them at infinity.

        Written raw when this process's self-check passed: no validation here (``_pointcheck`` does it);
        otherwise built by the validating constructors (ValueError names the first bad row).
        """
        writer = self.writer(group)
        if writer is not None:
            return writer.build(rows)
        make = self.g1 if group == 1 else self.g2
        points = []
        for i, coords in enumerate(plain_coordinates(self.curve, rows)):
            try:
                points.append(make(coords))  # type: ignore[arg-type]
            except ValueError:
                raise ValueError(f"point {i} is not a point of G{group}") from None
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
        """How this process builds bases of ``group``: "raw", or "checked (why raw is not used)"."""
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

    def outside_subgroup(self, points: Sequence[Point], group: int, rounds: int | None = None) -> int | None:
        """Index of the first point (on the curve) outside the subgroup of order r, or None. ``rounds``:
        where the test is by random combinations (BN254 G2), run only that many of its rounds."""
        raise NotImplementedError

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


def _on_curve_g1(curve: Curve, xy: G1, b: int) -> bool:
    x, y = xy
    q = curve.q
    return 0 <= x < q and 0 <= y < q and (y * y - x * x * x - b) % q == 0


# BN254's twist: y^2 = x^3 + 3 / (9 + u) over Fq2 = Fq[u] / (u^2 + 1).
_BN_TWIST_B = (
    19485874751759354771024239261021720505790618469301721065564631296452457478373,
    266929791119991161246907387137283842545076965332900288569378510910307636690,
)
_BLS_TWIST_B = (4, 4)


def _fq2_mul(a: tuple[int, int], b: tuple[int, int], q: int) -> tuple[int, int]:
    return ((a[0] * b[0] - a[1] * b[1]) % q, (a[0] * b[1] + a[1] * b[0]) % q)


def _on_curve_g2(curve: Curve, xy: G2, b: tuple[int, int]) -> bool:
    q = curve.q
    if not all(0 <= c < q for c in xy):
        return False
    x, y = (xy[0], xy[1]), (xy[2], xy[3])
    lhs = _fq2_mul(y, y, q)
    x3 = _fq2_mul(_fq2_mul(x, x, q), x, q)
    return lhs == ((x3[0] + b[0]) % q, (x3[1] + b[1]) % q)


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


def _fv(ints: Sequence[int]) -> FieldVector:
    return np.frombuffer(b"".join(k.to_bytes(32, "little") for k in ints), dtype="<u8").reshape(-1, 4)


class _BN254(Backend):
    native_msm_curve = True  # the C extension's MSM: 1.6-2.4x zksnake's at 2^16, on every core

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
        if not trusted and not _on_curve_g1(self.curve, xy, 3):
            raise ValueError("not a point of G1")
        return self._ec.PointG1(*xy)

    def g2(self, xy: G2, *, trusted: bool = False) -> Point:
        if xy == (0, 0, 0, 0):
            return self._ec.g2() * 0
        if not trusted and not _on_curve_g2(self.curve, xy, _BN_TWIST_B):
            raise ValueError("not a point of G2")
        try:
            return self._ec.PointG2(*xy)
        except BaseException as exc:  # the library panics (a BaseException) on points outside G2
            if type(exc).__name__ == "PanicException":
                raise ValueError("not a point of G2") from None
            raise

    def _raw_writer(self, group: int) -> RawWriter:
        return RawWriter(self._ec.g1 if group == 1 else self._ec.g2, self.curve.n8q, group)

    def outside_subgroup(self, points: Sequence[Point], group: int, rounds: int | None = None) -> int | None:
        if group == 1:
            return None  # BN254 G1 has cofactor 1: on the curve is in the group
        msm = self._ec.multiscalar_mul_g2
        smallest = BN254_G2_COFACTOR_PRIMES[0]
        if all_in_subgroup(points, lambda pts, ks: msm(list(pts), ks), self._in_g2, smallest, rounds):
            return None
        return self.first_outside_each(points)  # a refusal names the first bad point: test each

    def rows_outside_subgroup(
        self, rows: NDArray[np.uint8], group: int, rounds: int | None = None
    ) -> int | None:
        if group == 1:
            return None
        if not self.native_msm:
            return super().rows_outside_subgroup(rows, group, rounds)
        threads = cpu_threads()

        def combine(points: Sequence[Any], ks: list[int]) -> G2:
            return self.msm_rows(rows, _fv(ks), 2, threads)  # type: ignore[return-value]

        def in_g2(xy: G2) -> bool:  # [r]S = 0: an MSM of one term (the group law on the whole twist)
            return not any(self.msm_rows(mont_row(self.curve, xy)[None, :], _fv([self.curve.r]), 2, 1))

        smallest = BN254_G2_COFACTOR_PRIMES[0]
        if all_in_subgroup(rows, combine, in_g2, smallest, rounds):  # type: ignore[arg-type]
            return None
        index = np.flatnonzero(rows.any(axis=1))  # a refusal names the first bad point: test each
        outside = self.first_outside_each(self.bases(rows[index], 2))
        return None if outside is None else int(index[outside])

    def first_outside_each(self, points: Sequence[Point]) -> int | None:
        """Index of the first G2 point outside the subgroup, by ``[r]P = 0`` on each (~240 µs a point)."""
        for i, p in enumerate(points):
            if not self._in_g2(p):
                return i
        return None

    def _in_g2(self, point: Point) -> bool:
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


class _BLS12381(Backend):
    # the C extension's MSM with mulx products and sums: 2.1x py-arkworks' on G1 and 2.3x on G2 at 2^16,
    # one thread each (and every core, where py-arkworks runs one); the portable 6-limb C is slower
    native_msm_curve = bool(_curvemath is not None and _curvemath.mulx)

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
        if xy != (0, 0) and not _on_curve_g1(self.curve, xy, 4):
            raise ValueError("not a point of G1")
        try:
            return self._ark.G1Point.from_xy_bytes_le(self._bytes(xy))
        except Exception:
            raise ValueError("not a point of G1") from None

    def g2(self, xy: G2, *, trusted: bool = False) -> Point:
        if trusted:
            return self._ark.G2Point.from_xy_bytes_unchecked_le(self._bytes(xy))
        if xy != (0, 0, 0, 0) and not _on_curve_g2(self.curve, xy, _BLS_TWIST_B):
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

    def outside_subgroup(self, points: Sequence[Point], group: int, rounds: int | None = None) -> int | None:
        for i, p in enumerate(points):  # per point: ``rounds`` does not apply
            if not p.is_in_subgroup():
                return i
        return None

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


_BACKENDS: dict[str, Backend] = {}


def backend(curve: Curve) -> Backend:
    """The (process-wide, lazily built) backend of ``curve``."""
    found = _BACKENDS.get(curve.name)
    if found is None:
        found = _BN254() if curve.name == BN128.name else _BLS12381()
        _BACKENDS[curve.name] = found
    return found
