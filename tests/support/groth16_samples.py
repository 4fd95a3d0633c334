"""Small circuits built by hand (no compiler) for the Groth16 tests."""

from __future__ import annotations

import numpy as np

from prooflane.groth16 import R1CS, Curve, SparseMatrix, Witness, from_ints


def square_chain(curve: Curve, n: int, x: int = 3, y: int = 5) -> tuple[R1CS, Witness]:
    """``s[i+1] = s[i]^2 + y`` from ``s[0] = x``, public output ``out = s[n]``, public input ``y``.

    Wires: 0 one, 1 out, 2 y, 3 x, 4.. s[1..n].
    """
    r = curve.r
    s = [x]
    for _ in range(n):
        s.append((s[-1] * s[-1] + y) % r)
    values = [1, s[n], y, x, *s[1:]]
    entries: dict[str, list[tuple[int, int, int]]] = {"a": [], "b": [], "c": []}
    for i in range(n):
        wire = 3 if i == 0 else 3 + i
        entries["a"].append((i, wire, 1))
        entries["b"].append((i, wire, 1))
        entries["c"].append((i, 4 + i, 1))
        entries["c"].append((i, 2, r - 1))
    entries["a"].append((n, 3 + n, 1))  # out = s[n] * 1
    entries["b"].append((n, 0, 1))
    entries["c"].append((n, 1, 1))
    a, b, c = (_matrix(entries[k], r) for k in "abc")
    r1cs = R1CS(curve, len(values), 1, 1, 1, n + 1, a, b, c, len(values))
    return r1cs, Witness(curve, from_ints(values))


def _matrix(entries: list[tuple[int, int, int]], r: int) -> SparseMatrix:
    rows = np.array([e[0] for e in entries], dtype=np.int64)
    cols = np.array([e[1] for e in entries], dtype=np.int64)
    return SparseMatrix(rows, cols, from_ints([e[2] for e in entries], r))


# The smallest circom circuit with a public output: c = a * b.
MUL_CIRCOM = """pragma circom 2.0.0;
template Mul() {
    signal input a;
    signal input b;
    signal output c;
    c <== a * b;
}
component main = Mul();
"""
