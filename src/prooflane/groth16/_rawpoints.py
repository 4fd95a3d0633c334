"""Library point objects filled with a key's own bytes, without the library's per-point validation.

Both native libraries wrap an arkworks projective point in a pyo3 object: a 16-byte Python object header,
then ``x, y, z`` as base-field elements in Montgomery form (little-endian 64-bit limbs, ``R = 2^(8*n8q)``,
the very form a .zkey stores), then the object's borrow flag. A ``RawWriter`` makes fresh copies of the
generator (``z`` is already Montgomery one) and writes a row's ``x, y`` over them, for a whole section at
once through one numpy scatter over the objects' addresses: about 0.4 µs a point where the validating
constructors take 100-300 µs.

That layout belongs to one build of each library (pinned exactly in pyproject.toml), so a writer is used
only after ``self_check`` has passed in this process: the object size, the generator's bytes, and known
points built both ways (equality, doubling, an MSM) must agree. On any difference the backend falls back
to the validating constructors. Validation of the key's points is the caller's part (``_pointcheck``).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["HEADER_BYTES", "RawWriter"]

HEADER_BYTES = 16  # ob_refcnt and ob_type: where a pyo3 object's Rust value begins on 64-bit CPython
_TRAILER_BYTES = 8  # the pyo3 borrow flag after the value


class RawWriter:
    """Builds library points of one group from rows of Montgomery-form affine coordinates.

    ``make`` returns a fresh generator object; ``n8`` is the bytes of one base-field element; ``group`` is
    1 (coordinates in Fq) or 2 (in Fq2, ``c0`` then ``c1``).
    """

    def __init__(self, make: Callable[[], Any], n8: int, group: int) -> None:
        self.make, self.n8, self.group = make, n8, group
        self.coord_bytes = n8 * group  # one coordinate: x, y or z
        self.xy_words = 2 * self.coord_bytes // 8

    def expected_size(self) -> int:
        """The object size this layout implies: header, x, y, z, borrow flag."""
        return HEADER_BYTES + 3 * self.coord_bytes + _TRAILER_BYTES

    def build(self, rows: NDArray[np.uint8]) -> list[Any]:
        """One new point per row (rows of ``2 * coord_bytes`` bytes; none of them all zero)."""
        n = rows.shape[0]
        if rows.shape[1] != 2 * self.coord_bytes:
            raise ValueError(f"rows of {rows.shape[1]} bytes: expected {2 * self.coord_bytes}")
        make = self.make
        points = [make() for _ in range(n)]
        if n:
            words = np.ascontiguousarray(rows).view("<u8").reshape(n, self.xy_words)
            _scatter(points, HEADER_BYTES, words)
        return points

    def self_check(
        self,
        checked: Sequence[Any],
        rows: NDArray[np.uint8],
        template: bytes,
        msm: Callable[[list[Any], list[int]], Any],
    ) -> str | None:
        """None when raw building is safe here, else the reason it is not.

        ``checked``: points built by the validating constructor; ``rows``: their Montgomery coordinates;
        ``template``: the expected bytes of ``make()``'s x, y, z; ``msm``: the library's MSM.
        """
        sample = self.make()
        if type(sample).__basicsize__ != self.expected_size() or type(sample).__itemsize__ != 0:
            return (
                f"{type(sample).__name__} is {type(sample).__basicsize__} bytes, not {self.expected_size()}"
            )
        if ctypes.string_at(id(sample) + HEADER_BYTES, 3 * self.coord_bytes) != template:
            return "the generator's coordinates are not where this layout expects them"
        raw = self.build(rows)
        if len({id(p) for p in raw}) != len(raw):
            return "the generator constructor returns shared objects"
        for built, good in zip(raw, checked, strict=True):
            if not (built == good and built + built == good + good and built - good == good - built):
                return "a point written raw differs from the same point built by the library"
        scalars = [(i + 1) * 0x9E3779B97F4A7C15 for i in range(len(raw))]
        same = msm(raw, scalars) == msm(list(checked), scalars)  # only == is defined on library points
        if not same:
            return "an MSM over points written raw differs from the same MSM over checked points"
        return None


def _scatter(objects: list[Any], offset: int, words: NDArray[np.uint64]) -> None:
    """Write ``words[i]`` at ``offset`` bytes into ``objects[i]``, for all ``i`` in one numpy assignment."""
    addr = np.fromiter(map(id, objects), dtype=np.uint64, count=len(objects))
    if np.any(addr % 8):
        raise ValueError("point objects are not 8-byte aligned")
    base = int(addr.min())
    span = (int(addr.max()) - base + offset) // 8 + words.shape[1]
    memory = np.ctypeslib.as_array((ctypes.c_uint64 * span).from_address(base))
    index = ((addr - base + offset) // 8).astype(np.intp)[:, None] + np.arange(words.shape[1], dtype=np.intp)
    memory[index] = words
