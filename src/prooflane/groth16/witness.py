"""A circuit's full assignment (wire 0 is the constant one) and circom's .wtns file format."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ._binfile import read_sections, scalar_field_header, section, write_sections
from .curves import Curve
from .errors import FormatError
from .field import FieldVector

__all__ = ["Witness", "read_wtns", "write_wtns"]


@dataclass(frozen=True, eq=False)
class Witness:
    """Values of every wire of one circuit, as a FieldVector (canonical, below ``curve.r``)."""

    curve: Curve
    values: FieldVector

    def __len__(self) -> int:
        return int(self.values.shape[0])


def read_wtns(path: str | Path, data: bytes | None = None) -> Witness:
    """Read a circom .wtns file (version 2); ``data``: its bytes, when the caller read them already
    (``path`` then names the file in errors)."""
    version, sections = read_sections(path, b"wtns", data)
    header, curve = scalar_field_header(path, sections, ".wtns", version, 2)
    count = header.u32()
    raw = section(path, sections, 2, "values")
    if len(raw) != 32 * count:
        raise FormatError(path, f"section 2 holds {len(raw)} bytes: expected {count} values of 32 bytes")
    values = np.frombuffer(raw, dtype="<u8").reshape(-1, 4).astype(np.uint64)
    return Witness(curve, values)


def write_wtns(path: str | Path, witness: Witness) -> None:
    """Write ``witness`` as a circom .wtns file (version 2)."""
    header = struct.pack("<I", 32) + witness.curve.r.to_bytes(32, "little") + struct.pack("<I", len(witness))
    values = np.ascontiguousarray(witness.values, dtype="<u8").tobytes()
    write_sections(path, b"wtns", 2, [(1, header), (2, values)])
