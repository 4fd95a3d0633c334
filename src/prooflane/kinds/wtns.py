"""A .wtns file's header (the wire count it says) and the size bound of a circuit's .wtns files."""

from __future__ import annotations

import struct

__all__ = ["WTNS_HEADER_BYTES", "WTNS_VERSION", "wtns_limit", "wtns_version", "wtns_wires"]

WTNS_VERSION = 2
"""The ``.wtns`` version prooflane reads and writes (``groth16.read_wtns``), as circom 2 and snarkjs do."""


def wtns_wires(head: bytes) -> int | None:
    """The wire count a .wtns file's header (its first bytes, ``head``) says, or None when those bytes are
    not the start of a .wtns file with its header section first (as circom and prooflane write them)."""
    if len(head) < 32 or head[:4] != b"wtns":
        return None
    kind, size = struct.unpack_from("<IQ", head, 12)
    if kind != 1 or size < 8:
        return None
    (n8,) = struct.unpack_from("<I", head, 24)
    if 28 + n8 + 4 > len(head) or size != 4 + n8 + 4:
        return None
    (wires,) = struct.unpack_from("<I", head, 28 + n8)
    return int(wires)


def wtns_version(head: bytes) -> int | None:
    """The version a .wtns file's header says (its first bytes, ``head``), or None when those bytes are not
    the start of a .wtns file with its header section first."""
    if wtns_wires(head) is None:
        return None
    (version,) = struct.unpack_from("<I", head, 4)
    return int(version)


WTNS_HEADER_BYTES = 4096
"""Room for a .wtns file's headers beside its values (circom writes 76 bytes of them)."""


def wtns_limit(wires: int) -> int:
    """The largest .wtns file accepted for a circuit of ``wires`` wires: 32 bytes each, and the headers."""
    return 32 * wires + WTNS_HEADER_BYTES
