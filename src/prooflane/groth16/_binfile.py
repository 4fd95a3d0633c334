"""The container shared by circom's .r1cs/.wtns and snarkjs' .zkey: magic, version, typed sections.

Layout: 4-byte magic, u32 version, u32 section count, then per section a u32 type, a u64 size and the
data. Sections may come in any order; a type may appear at most once in the files prooflane reads.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from pathlib import Path

from .curves import Curve, curve_by_prime
from .errors import FormatError

__all__ = ["Reader", "read_sections", "write_sections"]


def read_sections(
    path: str | Path, magic: bytes, data: bytes | None = None
) -> tuple[int, dict[int, memoryview]]:
    """Read ``path`` (or take ``data``, its bytes read already), check its magic, return its version and
    its sections by type."""
    if data is None:
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise FormatError(path, f"cannot read: {exc.strerror or exc}") from None
    if len(data) < 12:
        raise FormatError(path, f"too short to be a .{magic.decode()} file ({len(data)} bytes)")
    if data[:4] != magic:
        raise FormatError(path, f"wrong magic {bytes(data[:4])!r}: expected {magic!r}")
    version, count = struct.unpack_from("<II", data, 4)
    view = memoryview(data)
    sections: dict[int, memoryview] = {}
    pos = 12
    for _ in range(count):
        if pos + 12 > len(data):
            raise FormatError(path, "truncated section header")
        kind, size = struct.unpack_from("<IQ", data, pos)
        pos += 12
        if pos + size > len(data):
            raise FormatError(path, f"truncated section {kind}: needs {size} bytes, {len(data) - pos} left")
        if kind in sections:
            raise FormatError(path, f"section {kind} appears twice")
        sections[kind] = view[pos : pos + size]
        pos += size
    return version, sections


def write_sections(
    path: str | Path, magic: bytes, version: int, sections: Iterable[tuple[int, bytes]]
) -> None:
    """Write a file of ``sections`` (type, data) in the given order."""
    parts = list(sections)
    out = [magic, struct.pack("<II", version, len(parts))]
    for kind, data in parts:
        out.append(struct.pack("<IQ", kind, len(data)))
        out.append(data)
    Path(path).write_bytes(b"".join(out))


class Reader:
    """A cursor over one section that turns running past its end into a FormatError."""

    def __init__(self, path: str | Path, name: str, data: memoryview) -> None:
        self.path, self.name, self.data, self.pos = path, name, data, 0

    def take(self, n: int) -> memoryview:
        """The next ``n`` bytes."""
        if self.pos + n > len(self.data):
            raise FormatError(self.path, f"section {self.name} is truncated")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def u32(self) -> int:
        """The next little-endian u32."""
        return int(struct.unpack("<I", self.take(4))[0])

    def u64(self) -> int:
        """The next little-endian u64."""
        return int(struct.unpack("<Q", self.take(8))[0])

    def integer(self, n: int) -> int:
        """The next ``n``-byte little-endian unsigned integer."""
        return int.from_bytes(self.take(n), "little")


def section(path: str | Path, sections: dict[int, memoryview], kind: int, name: str) -> memoryview:
    """Section ``kind`` or a FormatError naming what is missing."""
    try:
        return sections[kind]
    except KeyError:
        raise FormatError(path, f"missing section {kind} ({name})") from None


def scalar_field_header(
    path: str | Path, sections: dict[int, memoryview], kind: str, version: int, expected: int
) -> tuple[Reader, Curve]:
    """Check a circom file's version and read its header's scalar-field prime (.r1cs and .wtns share this).

    Returns the header reader, positioned after the prime, and the curve the prime belongs to.
    """
    if version != expected:
        raise FormatError(path, f"unsupported {kind} version {version}: expected {expected}")
    header = Reader(path, "1 (header)", section(path, sections, 1, "header"))
    n8 = header.u32()
    if n8 != 32:
        raise FormatError(path, f"field size {n8} bytes: expected 32")
    prime = header.integer(n8)
    try:
        curve = curve_by_prime(prime)
    except ValueError:
        raise FormatError(path, f"unsupported prime {prime}") from None
    if prime != curve.r:
        raise FormatError(path, "the header prime is a base field, not a scalar field")
    return header, curve
