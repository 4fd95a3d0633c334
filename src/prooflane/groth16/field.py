"""Vectors of field elements as numpy arrays that cross process boundaries as raw bytes.

A ``FieldVector`` is a ``numpy.uint64`` array of shape ``(n, 4)``: each row is one element of a scalar field,
canonical (below ``r``), as four little-endian 64-bit limbs, which is byte for byte the layout of .wtns
values. Pickling one costs a memory copy, never a list of Python ints.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
from numpy.typing import NDArray

__all__ = ["FieldVector", "from_ints", "to_ints", "zeros"]

FieldVector = NDArray[np.uint64]


def zeros(n: int) -> FieldVector:
    """A vector of ``n`` zero elements."""
    return np.zeros((n, 4), dtype=np.uint64)


def from_ints(values: Iterable[int], modulus: int | None = None) -> FieldVector:
    """Pack Python ints into a FieldVector, reducing by ``modulus`` when one is given."""
    if modulus is not None:
        values = (v % modulus for v in values)
    raw = b"".join(v.to_bytes(32, "little") for v in values)
    return np.frombuffer(raw, dtype="<u8").reshape(-1, 4).astype(np.uint64, copy=True)


def to_ints(vector: FieldVector | Sequence[Sequence[int]]) -> list[int]:
    """Unpack a FieldVector into Python ints."""
    raw = np.ascontiguousarray(vector, dtype="<u8").tobytes()
    return [int.from_bytes(raw[i : i + 32], "little") for i in range(0, len(raw), 32)]
