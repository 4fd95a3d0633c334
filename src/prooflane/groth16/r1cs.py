"""The rank-1 constraint system: the one model the circuit builder writes and the prover reads.

Wire numbering follows circom: wire 0 is the constant one, then the public outputs, the public inputs,
the private inputs, and every other signal. A constraint ``i`` says ``(A_i . w) * (B_i . w) = C_i . w``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from ._binfile import read_sections, scalar_field_header, section, write_sections
from .curves import Curve
from .errors import FormatError
from .field import FieldVector

__all__ = ["R1CS", "SparseMatrix", "read_r1cs", "write_r1cs"]


@dataclass(frozen=True, eq=False)
class SparseMatrix:
    """One of A, B, C in coordinate form: ``values[k]`` sits at ``(rows[k], cols[k])``.

    Invariants: the three arrays have the same length; ``values`` is a FieldVector of canonical elements;
    no entry has a zero value.
    """

    rows: NDArray[np.int64]
    cols: NDArray[np.int64]
    values: FieldVector

    @property
    def nnz(self) -> int:
        """Number of stored (non-zero) entries."""
        return int(self.rows.shape[0])


@dataclass(frozen=True, eq=False)
class R1CS:
    """A circuit's constraints, as a circom .r1cs file holds them."""

    curve: Curve
    n_wires: int
    n_pub_out: int
    n_pub_in: int
    n_prv_in: int
    n_constraints: int
    a: SparseMatrix
    b: SparseMatrix
    c: SparseMatrix
    n_labels: int
    # wire -> label id (circom's section 3); None means the identity map.
    wire_to_label: NDArray[np.int64] | None = None

    @property
    def n_public(self) -> int:
        """Public signals (outputs, then public inputs), not counting the constant wire 0."""
        return self.n_pub_out + self.n_pub_in


def read_r1cs(path: str | Path) -> R1CS:
    """Read a circom .r1cs file (version 1; custom gates are refused)."""
    version, sections = read_sections(path, b"r1cs")
    header, curve = scalar_field_header(path, sections, ".r1cs", version, 1)
    n_wires, n_pub_out, n_pub_in, n_prv_in = (header.u32() for _ in range(4))
    n_labels = header.u64()
    n_constraints = header.u32()
    if 4 in sections or 5 in sections:
        raise FormatError(path, "custom gates (PLONK circuits) are not supported")
    a, b, c = _read_constraints(path, section(path, sections, 2, "constraints"), n_constraints, n_wires)
    wire_to_label = None
    if 3 in sections:
        raw = sections[3]
        if len(raw) != 8 * n_wires:
            raise FormatError(path, f"section 3 (wire map) has {len(raw)} bytes: expected {8 * n_wires}")
        labels = np.frombuffer(raw, dtype="<u8").astype(np.int64)
        if not np.array_equal(labels, np.arange(n_wires, dtype=np.int64)):
            wire_to_label = labels
    return R1CS(
        curve, n_wires, n_pub_out, n_pub_in, n_prv_in, n_constraints, a, b, c, n_labels, wire_to_label
    )


def _read_constraints(
    path: str | Path, data: memoryview, n_constraints: int, n_wires: int
) -> tuple[SparseMatrix, SparseMatrix, SparseMatrix]:
    raw = bytes(data)
    rows: list[list[int]] = [[], [], []]
    cols: list[list[int]] = [[], [], []]
    vals: list[list[bytes]] = [[], [], []]
    pos = 0
    unpack = struct.unpack_from
    try:
        for i in range(n_constraints):
            for m in range(3):
                (count,) = unpack("<I", raw, pos)
                pos += 4
                for _ in range(count):
                    (wire,) = unpack("<I", raw, pos)
                    rows[m].append(i)
                    cols[m].append(wire)
                    vals[m].append(raw[pos + 4 : pos + 36])
                    pos += 36
    except struct.error:
        raise FormatError(path, "section 2 (constraints) is truncated") from None
    if pos > len(raw) or any(v and len(v[-1]) != 32 for v in vals):
        raise FormatError(path, "section 2 (constraints) is truncated")
    if pos != len(raw):
        raise FormatError(path, f"section 2 (constraints) has {len(raw) - pos} trailing bytes")
    out = []
    for m in range(3):
        col = np.array(cols[m], dtype=np.int64)
        if col.size and int(col.max()) >= n_wires:
            raise FormatError(path, f"a constraint refers to wire {int(col.max())} of {n_wires}")
        values = np.frombuffer(b"".join(vals[m]), dtype="<u8").reshape(-1, 4).astype(np.uint64)
        out.append(SparseMatrix(np.array(rows[m], dtype=np.int64), col, values))
    return out[0], out[1], out[2]


def write_r1cs(path: str | Path, r1cs: R1CS) -> None:
    """Write ``r1cs`` as a circom .r1cs file (version 1)."""
    header = struct.pack("<I", 32) + r1cs.curve.r.to_bytes(32, "little")
    header += struct.pack("<IIII", r1cs.n_wires, r1cs.n_pub_out, r1cs.n_pub_in, r1cs.n_prv_in)
    header += struct.pack("<QI", r1cs.n_labels, r1cs.n_constraints)
    labels = r1cs.wire_to_label if r1cs.wire_to_label is not None else np.arange(r1cs.n_wires)
    wire_map = np.asarray(labels, dtype="<u8").tobytes()
    write_sections(path, b"r1cs", 1, [(1, header), (2, _constraint_bytes(r1cs)), (3, wire_map)])


def _constraint_bytes(r1cs: R1CS) -> bytes:
    per_row: list[list[list[bytes]]] = [[[], [], []] for _ in range(r1cs.n_constraints)]
    for m, matrix in enumerate((r1cs.a, r1cs.b, r1cs.c)):
        raw = np.ascontiguousarray(matrix.values, dtype="<u8").tobytes()
        for k, (row, col) in enumerate(zip(matrix.rows.tolist(), matrix.cols.tolist(), strict=True)):
            per_row[row][m].append(struct.pack("<I", col) + raw[32 * k : 32 * k + 32])
    out = []
    for row in per_row:
        for terms in row:
            out.append(struct.pack("<I", len(terms)))
            out.extend(terms)
    return b"".join(out)
