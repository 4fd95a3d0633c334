"""The one arithmetic seam of the prover: what a proof needs of a curve's arithmetic, implemented twice.

``extension.py`` is prooflane's C extension over a key's rows as they lie in the (memory-mapped) file: the
fast path, required where it builds. ``libraries.py`` is the libraries over point objects (zksnake,
py-arkworks-bls12381): the path where the C extension is not built, or is switched off by
``PROOFLANE_NATIVE=0``. One of them is chosen once per curve and process (``choose.py``); the prover calls
only these methods and never asks which one runs.
"""

from __future__ import annotations

import mmap
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from ..curves import Curve
from ..field import FieldVector
from ..points import G1, G2, BadPoint
from ..witness import Witness

__all__ = [
    "MAX_THREADS",
    "NATIVE_ENV",
    "THREADS_ENV",
    "Arithmetic",
    "BadPoint",
    "Section",
    "Tables",
    "cpu_threads",
    "table_bytes",
    "table_shape",
]

NATIVE_ENV = "PROOFLANE_NATIVE"
"""``PROOFLANE_NATIVE=0`` leaves the C extension unused: the libraries prove every curve (read once, when a
process first chooses a curve's arithmetic; at install time it skips building the extension)."""
THREADS_ENV = "PROOFLANE_THREADS"
"""``PROOFLANE_THREADS=N``: the threads a call of the C extension runs unless told (see ``cpu_threads``)."""
MAX_THREADS = 64
"""The most threads one call runs; the C extension clamps to the same bound at its boundary."""


def cpu_threads() -> int:
    """The threads a call runs unless told: ``PROOFLANE_THREADS`` where set to a positive number (at most
    ``MAX_THREADS``), else the cores this process may run on (its CPU affinity), at most
    ``MAX_THREADS``."""
    given = os.environ.get(THREADS_ENV, "").strip()
    if given.isdigit() and int(given) > 0:
        return min(int(given), MAX_THREADS)
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return min(max(cores, 1), MAX_THREADS)


@dataclass(frozen=True, eq=False)
class Section:
    """One base section as an arithmetic computes with it: the section's rows (a view of the key: nothing
    copied), and, for the libraries, point objects of the rows not at infinity (``index``); ``tables``:
    fixed-base tables of the rows (``Arithmetic.tabulate``), or None."""

    group: int
    rows: NDArray[np.uint8]
    points: list[Any] = field(default_factory=list)
    index: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    tables: Tables | None = None


@dataclass(frozen=True, eq=False)
class Tables:
    """Fixed-base tables of a section's rows: ``rows[k]·2^(window·stride·t)`` for ``t < count``, each row's
    ``count`` multiples side by side (``bytes``), so that an MSM sums all of a scalar's windows ``w``,
    ``w + stride``, ... in one pass of buckets and runs ``stride`` passes instead of one a window."""

    window: int
    stride: int
    count: int
    data: bytes | mmap.mmap  # a process's own, or mapped from the stored file (``_tablecache``)


TABLE_WINDOW = 13
"""Window bits of an MSM over tables: wider ones miss the cache (2^12 buckets of G2 fill a core's L2)."""
TABLE_STRIDE = 2
"""Windows a table: half the tables of one a window, for one more pass of buckets (measured the same)."""


def table_shape(curve: Curve, rows: int) -> tuple[int, int, int]:
    """(window bits, stride, tables) of the fixed-base tables of a section of ``rows`` rows on ``curve``:
    enough windows for any scalar below r with signed digits (``r``'s bits + 2), narrower windows for
    sections too short to fill 2^12 buckets."""
    window = max(4, min(TABLE_WINDOW, rows.bit_length() - 3))
    windows = -(-(curve.r.bit_length() + 2) // window)
    return window, TABLE_STRIDE, -(-windows // TABLE_STRIDE)


def table_bytes(curve: Curve, group: int, rows: int) -> int:
    """Bytes of the fixed-base tables of a section of ``rows`` rows of ``group`` on ``curve``."""
    return rows * table_shape(curve, rows)[2] * 2 * group * curve.n8q


class Arithmetic(ABC):
    """One curve's arithmetic for the prover. Its methods are pure functions of their arguments (and of
    this process's libraries): nothing is cached here; the prover caches sections."""

    name: ClassVar[str]
    """"c-extension" or "libraries"."""

    def __init__(self, curve: Curve, why: str | None = None) -> None:
        self.curve = curve
        self.why = why  # why this arithmetic was chosen, where it is not the fast path

    def describe(self) -> str:
        """What ``/status`` and ``prove --json`` say: "c-extension", or "libraries: <why>"."""
        return self.name if self.why is None else f"{self.name}: {self.why}"

    def products(self) -> str:
        """How the MSMs' field products run (``prove --json``'s ``"products"``): "libraries" here; the C
        extension says which of its products (``ExtensionArithmetic.products``)."""
        return "libraries"

    def kernels(self) -> list[str]:
        """The fast kernels that run now (``prove --json``'s ``"kernels"``): none here; the C extension
        names its own (``ExtensionArithmetic.kernels``)."""
        return []

    @abstractmethod
    def coefficients(self, values: bytes) -> bytes:
        """A .zkey's coefficients (32 bytes each, stored as ``c·R^2 mod r``, ``R = 2^256``), plain."""

    @abstractmethod
    def synthesize(
        self,
        matrix: NDArray[np.uint32],
        rows: NDArray[np.int64],
        wires: NDArray[np.int64],
        values: FieldVector,
        witness: Witness,
        n_rows: int,
    ) -> tuple[FieldVector, FieldVector, FieldVector]:
        """``A·w``, ``B·w`` and their product over ``n_rows`` rows, from a key's terms (``matrix`` 0 = A, 1 =
        B; plain values). Raises InvalidWitnessError when a witness value is not below r."""

    @abstractmethod
    def coset_h(self, a: FieldVector, b: FieldVector, c: FieldVector, n: int, threads: int) -> FieldVector:
        """``a*b - c`` on the odd coset ``w_2n·<w_n>`` in snarkjs' order, from the three vectors' values on
        ``<w_n>`` (snarkjs' roots of unity, ``roots.py``)."""

    @abstractmethod
    def section(self, rows: NDArray[np.uint8], group: int, *, checked: bool) -> Section:
        """What ``msm`` needs of one base section. Unless ``checked`` (remembered from an earlier check of
        the same key), every row is validated: on the curve, and in the subgroup of order r where the group
        has a cofactor; the first bad row raises BadPoint."""

    def tabulate(self, section: Section, threads: int) -> Section:
        """``section`` with fixed-base tables (``Tables``) where this arithmetic uses them (the C
        extension), else ``section`` itself."""
        return section

    def table_bytes(self, group: int, rows: int) -> int:
        """Bytes ``tabulate`` adds to a section of ``rows`` rows of ``group`` (0 where it adds none)."""
        return 0

    def table_shape(self, rows: int) -> tuple[int, int, int] | None:
        """(window, stride, count) of the tables ``tabulate`` builds for ``rows`` rows, None where none."""
        return None

    def row_tables(self, section: Section, row: int) -> bytes:
        """The tables of row ``row`` of ``section`` alone, bytes as ``tabulate`` lays them out (a check of
        tables made elsewhere)."""
        raise NotImplementedError(f"{self.name} builds no tables")

    @abstractmethod
    def msm(self, section: Section, scalars: FieldVector, threads: int) -> G1 | G2:
        """Sum of ``scalars[i]`` times the point of row ``i`` of ``section`` (plain affine coordinates, all
        zeros for infinity), on ``threads`` threads where the arithmetic can use more than one."""
