"""Proving keys and snarkjs' Groth16 .zkey format.

Sections: 1 protocol (1 = Groth16), 2 header (field sizes and primes, nVars, nPublic, domainSize, alpha1,
beta1, beta2, gamma2, delta1, delta2), 3 IC, 4 coefficients (A and B only: matrix, row, wire, value stored
as ``coef * R^2 mod r`` with ``R = 2^256``; one extra A row ``nConstraints + i`` on wire ``i`` for each
``i`` in ``0..nPublic``), 5 A, 6 B1, 7 B2, 8 C (private wires only), 9 H, 10 the ceremony's contributions.
Points are stored little-endian in Montgomery form with ``R = 2^(8*n8q)``; infinity is all-zero bytes.

A ``ProvingKey`` holds the bases as the file stores them (rows of little-endian Montgomery-form
coordinates) in numpy arrays, so reading costs no conversion and a key pickles as a few memory copies. The
bases' points are validated when a process builds them (``prover``: on the curve and in the subgroup,
once per key, remembered); ``read_zkey`` checks the header's points in full.
"""

from __future__ import annotations

import contextlib
import hashlib
import struct
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from ._binfile import Reader, read_sections, section, write_sections
from .adapters import library
from .arithmetic import arithmetic
from .curves import Curve, curve_by_prime
from .errors import FormatError
from .field import FieldVector
from .points import G1, G2, on_curve_g1
from .proof import VerificationKey

__all__ = ["Coefficients", "ProvingKey", "read_zkey", "write_zkey"]

_COEF = np.dtype([("matrix", "<u4"), ("row", "<u4"), ("wire", "<u4"), ("value", "<u8", (4,))])
_R2 = 2**512


@dataclass(frozen=True, eq=False)
class Coefficients:
    """The A and B matrices of the key (with the extra public rows), values as plain field elements."""

    matrix: NDArray[np.uint32]  # 0 = A, 1 = B
    row: NDArray[np.int64]
    wire: NDArray[np.int64]
    value: FieldVector


@dataclass(frozen=True, eq=False)
class ProvingKey:
    """A parsed Groth16 proving key. Bases are ``(n, 2*n8q)`` (G1) or ``(n, 4*n8q)`` (G2) uint8 rows of
    little-endian affine coordinates in Montgomery form (``x·2^(8*n8q) mod q``, as in the .zkey); a zero
    row is the point at infinity."""

    curve: Curve
    n_vars: int
    n_public: int
    domain_size: int
    alpha1: G1
    beta1: G1
    beta2: G2
    gamma2: G2
    delta1: G1
    delta2: G2
    ic: tuple[G1, ...]
    coefficients: Coefficients
    a_points: NDArray[np.uint8]
    b1_points: NDArray[np.uint8]
    b2_points: NDArray[np.uint8]
    c_points: NDArray[np.uint8]
    h_points: NDArray[np.uint8]
    contributions: bytes = b"\x00" * 64 + b"\x00\x00\x00\x00"

    @property
    def verification_key(self) -> VerificationKey:
        """The matching verification key."""
        return VerificationKey(
            self.curve, self.n_public, self.alpha1, self.beta2, self.gamma2, self.delta2, self.ic
        )

    @property
    def nbytes(self) -> int:
        """Bytes held in numpy arrays (what pickling copies)."""
        arrays = (self.a_points, self.b1_points, self.b2_points, self.c_points, self.h_points)
        coef = self.coefficients
        extra = coef.matrix.nbytes + coef.row.nbytes + coef.wire.nbytes + coef.value.nbytes
        return sum(a.nbytes for a in arrays) + extra

    @cached_property
    def digest(self) -> str:
        """A content hash of every point and count: the key of the per-process cache of library points
        and of the memory of checked points (``read_zkey`` has hashed a key it read already)."""
        header = (self.alpha1, self.beta2, self.delta1, self.delta2, self.ic)
        bases = (self.a_points, self.b1_points, self.b2_points, self.c_points, self.h_points)
        return _digest(self.curve, self.n_vars, self.n_public, self.domain_size, header, bases)


def read_zkey(path: str | Path) -> ProvingKey:
    """Read a snarkjs Groth16 .zkey."""
    _, sections = read_sections(path, b"zkey")
    protocol = Reader(path, "1 (protocol)", section(path, sections, 1, "protocol")).u32()
    if protocol != 1:
        raise FormatError(path, f"protocol {protocol} is not Groth16 (1)")
    hdr = Reader(path, "2 (Groth16 header)", section(path, sections, 2, "Groth16 header"))
    n8q = hdr.u32()
    q = hdr.integer(n8q)
    try:
        curve = curve_by_prime(q)
    except ValueError:
        raise FormatError(path, f"unsupported base field prime {q}") from None
    n8r = hdr.u32()
    if q != curve.q or n8q != curve.n8q or n8r != 32 or hdr.integer(n8r) != curve.r:
        raise FormatError(path, f"header field sizes or primes do not match {curve.name}")
    n_vars, n_public, domain_size = hdr.u32(), hdr.u32(), hdr.u32()
    if domain_size <= 0 or domain_size & (domain_size - 1):
        raise FormatError(path, f"domain size {domain_size} is not a power of two")
    conv = _Montgomery(curve)
    alpha1, beta1 = conv.g1(hdr.take(2 * n8q)), conv.g1(hdr.take(2 * n8q))
    beta2, gamma2 = conv.g2(hdr.take(4 * n8q)), conv.g2(hdr.take(4 * n8q))
    delta1, delta2 = conv.g1(hdr.take(2 * n8q)), conv.g2(hdr.take(4 * n8q))
    be = library(curve)
    for name, p in (("alpha1", alpha1), ("beta1", beta1), ("delta1", delta1)):
        try:
            be.g1(p)
        except ValueError:
            raise FormatError(path, f"{name} is not a point of G1") from None
    for name, p2 in (("beta2", beta2), ("gamma2", gamma2), ("delta2", delta2)):
        try:
            be.g2(p2)
        except ValueError:
            raise FormatError(path, f"{name} is not a point of G2") from None

    def points(kind: int, name: str, count: int, group: int) -> NDArray[np.uint8]:
        raw = section(path, sections, kind, name)
        width = 2 * group * n8q
        if len(raw) != count * width:
            raise FormatError(path, f"section {kind} ({name}) has {len(raw)} bytes: expected {count * width}")
        return np.frombuffer(raw, dtype=np.uint8).reshape(count, width)

    ic_rows = conv.plain(points(3, "IC", n_public + 1, 1).tobytes()).reshape(n_public + 1, 2 * n8q)
    for i, row in enumerate(ic_rows):
        p = _row_g1(row, n8q)
        if p != (0, 0) and not on_curve_g1(curve, p):
            raise FormatError(path, f"IC point {i} is not on the curve")
    ic = tuple(_row_g1(r, n8q) for r in ic_rows)
    bases = (
        points(5, "A", n_vars, 1),
        points(6, "B1", n_vars, 1),
        points(7, "B2", n_vars, 2),
        points(8, "C", n_vars - n_public - 1, 1),
        points(9, "H", domain_size, 1),
    )
    # The digest (hashlib lets go of the GIL) on a thread of its own while the coefficients leave
    # Montgomery form (so does the C extension): two cores, and the two as long as one (12-14 ms at 2^16).
    header = (alpha1, beta2, delta1, delta2, ic)
    digest: Future[str] | None = None
    with ThreadPoolExecutor(1) as pool:
        with contextlib.suppress(RuntimeError):  # no thread left (short of memory): hashed when first asked
            digest = pool.submit(_digest, curve, n_vars, n_public, domain_size, header, bases)
        coefficients = _read_coefficients(path, section(path, sections, 4, "coefficients"), curve)
    key = ProvingKey(
        curve=curve,
        n_vars=n_vars,
        n_public=n_public,
        domain_size=domain_size,
        alpha1=alpha1,
        beta1=beta1,
        beta2=beta2,
        gamma2=gamma2,
        delta1=delta1,
        delta2=delta2,
        ic=ic,
        coefficients=coefficients,
        a_points=bases[0],
        b1_points=bases[1],
        b2_points=bases[2],
        c_points=bases[3],
        h_points=bases[4],
        contributions=bytes(sections.get(10, b"\x00" * 68)),
    )
    if digest is not None:  # kept as `digest` (a cached_property) keeps it; else it hashes on first use
        key.__dict__["digest"] = digest.result()
    _check_coefficients(path, key)
    return key


def _digest(
    curve: Curve,
    n_vars: int,
    n_public: int,
    domain_size: int,
    header: tuple[object, ...],
    bases: tuple[NDArray[np.uint8], ...],
) -> str:
    h = hashlib.sha256(f"{curve.name}:{n_vars}:{n_public}:{domain_size}".encode())
    h.update(repr(header).encode())
    for a in bases:
        h.update(np.ascontiguousarray(a).data)
    return h.hexdigest()


def write_zkey(path: str | Path, key: ProvingKey) -> None:
    """Write ``key`` as a snarkjs Groth16 .zkey."""
    curve, conv = key.curve, _Montgomery(key.curve)
    hdr = struct.pack("<I", curve.n8q) + curve.q.to_bytes(curve.n8q, "little")
    hdr += struct.pack("<I", 32) + curve.r.to_bytes(32, "little")
    hdr += struct.pack("<III", key.n_vars, key.n_public, key.domain_size)
    for p in (key.alpha1, key.beta1, key.beta2, key.gamma2, key.delta1, key.delta2):
        hdr += conv.mont(_coords_bytes(p, curve.n8q))
    ic = b"".join(_coords_bytes(p, curve.n8q) for p in key.ic)
    sections = [
        (1, struct.pack("<I", 1)),
        (2, hdr),
        (3, conv.mont(ic)),
        (4, _coefficient_bytes(key)),
        (5, key.a_points.tobytes()),
        (6, key.b1_points.tobytes()),
        (7, key.b2_points.tobytes()),
        (8, key.c_points.tobytes()),
        (9, key.h_points.tobytes()),
        (10, key.contributions),
    ]
    write_sections(path, b"zkey", 1, sections)


class _Montgomery:
    """Conversion of base-field coordinates between plain and Montgomery form (``R = 2^(8*n8q)``)."""

    def __init__(self, curve: Curve) -> None:
        self.n8, self.q = curve.n8q, curve.q
        self.r_mod = pow(2, 8 * self.n8, self.q)
        self.r_inv = pow(self.r_mod, -1, self.q)

    def _map(self, raw: bytes | memoryview, factor: int) -> bytes:
        n8, q, data = self.n8, self.q, bytes(raw)
        frm = int.from_bytes
        return b"".join(
            (frm(data[i : i + n8], "little") * factor % q).to_bytes(n8, "little")
            for i in range(0, len(data), n8)
        )

    def plain(self, raw: bytes | memoryview) -> NDArray[np.uint8]:
        return np.frombuffer(self._map(raw, self.r_inv), dtype=np.uint8)

    def mont(self, raw: bytes) -> bytes:
        return self._map(raw, self.r_mod)

    def g1(self, raw: memoryview) -> G1:
        return _row_g1(self.plain(raw), self.n8)

    def g2(self, raw: memoryview) -> G2:
        b = self.plain(raw).tobytes()
        n8 = self.n8
        c = [int.from_bytes(b[k * n8 : (k + 1) * n8], "little") for k in range(4)]
        return (c[0], c[1], c[2], c[3])


def _row_g1(row: NDArray[np.uint8], n8: int) -> G1:
    b = row.tobytes()
    return (int.from_bytes(b[:n8], "little"), int.from_bytes(b[n8:], "little"))


def _coords_bytes(p: tuple[int, ...], n8: int) -> bytes:
    return b"".join(c.to_bytes(n8, "little") for c in p)


def _read_coefficients(path: str | Path, raw: memoryview, curve: Curve) -> Coefficients:
    reader = Reader(path, "4 (coefficients)", raw)
    count = reader.u32()
    body = reader.take(count * _COEF.itemsize)
    rec = np.frombuffer(body, dtype=_COEF)
    raw_values = np.ascontiguousarray(rec["value"]).tobytes()
    return _coefficients(rec, arithmetic(curve).coefficients(raw_values))


def _coefficients(rec: NDArray[np.void], plain: bytes) -> Coefficients:
    return Coefficients(
        matrix=rec["matrix"].astype(np.uint32),
        row=rec["row"].astype(np.int64),
        wire=rec["wire"].astype(np.int64),
        value=np.frombuffer(plain, dtype="<u8").reshape(-1, 4).astype(np.uint64),
    )


def _check_coefficients(path: str | Path, key: ProvingKey) -> None:
    coef = key.coefficients
    if coef.matrix.size and int(coef.matrix.max()) > 1:
        raise FormatError(path, "section 4 (coefficients): matrix must be 0 (A) or 1 (B)")
    if coef.wire.size and int(coef.wire.max()) >= key.n_vars:
        raise FormatError(path, f"section 4 (coefficients): wire {int(coef.wire.max())} of {key.n_vars}")
    if coef.row.size and int(coef.row.max()) >= key.domain_size:
        raise FormatError(path, "section 4 (coefficients): a row lies outside the domain")


def _coefficient_bytes(key: ProvingKey) -> bytes:
    coef = key.coefficients
    rec = np.zeros(coef.matrix.shape[0], dtype=_COEF)
    rec["matrix"], rec["row"], rec["wire"] = coef.matrix, coef.row, coef.wire
    r = key.curve.r
    raw = np.ascontiguousarray(coef.value, dtype="<u8").tobytes()
    mont = b"".join(
        (int.from_bytes(raw[i : i + 32], "little") * _R2 % r).to_bytes(32, "little")
        for i in range(0, len(raw), 32)
    )
    rec["value"] = np.frombuffer(mont, dtype="<u8").reshape(-1, 4)
    return struct.pack("<I", rec.shape[0]) + rec.tobytes()
