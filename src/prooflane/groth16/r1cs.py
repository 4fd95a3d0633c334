"""The rank-1 constraint system: the one model the circuit builder writes and the prover reads.

Wire numbering follows circom: wire 0 is the constant one, then the public outputs, the public inputs,
the private inputs, and every other signal. A constraint ``i`` says ``(A_i . w) * (B_i . w) = C_i . w``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from .curves import Curve
from .field import FieldVector

__all__ = ["R1CS", "SparseMatrix"]


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
