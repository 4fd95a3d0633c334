"""The container shared by circom's .r1cs/.wtns and snarkjs' .zkey: magic, version, typed sections.

Layout: 4-byte magic, u32 version, u32 section count, then per section a u32 type, a u64 size and the
data. Sections may come in any order; a type may appear at most once in the files prooflane reads.

A file of ``MAP_BYTES`` or more is memory-mapped read-only, not read: its sections (and the arrays a
reader makes over them, such as a key's points) are views of the mapping, so processes that read one key
share its pages, and a process touches only the sections it uses. A mapping sees the file as it is on
disk: replace a key by writing a new file and renaming it over the old one (as prooflane does), never by
rewriting it in place (a process that maps it would then read the new bytes, or die of SIGBUS where the
file was cut short).
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterable
from pathlib import Path

from .curves import Curve, curve_by_prime
from .errors import FormatError

__all__ = ["MAP_BYTES", "Reader", "read_sections", "write_sections"]

MAP_BYTES = 1 << 20
"""Files this size or larger are memory-mapped rather than read."""


def read_sections(
    path: str | Path, magic: bytes, data: bytes | mmap.mmap | None = None
) -> tuple[int, dict[int, memoryview]]:
    """Read ``path`` (or take ``data``, its bytes read already), check its magic, return its version and
    its sections by type."""
    if data is None:
        try:
            data = _contents(Path(path))
        except (OSError, ValueError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise FormatError(path, f"cannot read: {why}") from None
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


def _contents(path: Path) -> bytes | mmap.mmap:
    """The file's bytes: read when it is small, else a read-only mapping of it (the mapping keeps its own
    descriptor, closed when the last view of it is gone)."""
    with path.open("rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size >= MAP_BYTES:
            try:
                return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError):  # a file system that cannot map: read it instead
                pass
        return handle.read()


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
