"""Write a circuit once in Python; get its R1CS, and per job its witness, from a compiled evaluator.

A circuit is a function (or an object with a ``synthesize`` method) over a ``ConstraintSystem``: it declares
public and private inputs, allocates internal signals together with a *hint* that computes their values,
and enforces rank-1 constraints ``a * b = c`` over linear combinations written with ``+``, ``-`` and ``*``
by constants::

    def square(cs: ConstraintSystem) -> None:
        x = cs.private_input("x")
        y = cs.public_input("y")
        x2 = cs.alloc("x2", lambda v: v[x] * v[x])
        cs.enforce(x, x, x2, name="square")
        cs.enforce(x2, cs.one, y, name="output")

``compile_circuit`` runs the function once and keeps everything a job needs: the constraint matrices (in
circom's wire order, as ``groth16.R1CS``) and the list of hints. A job then only runs the hints and the
sparse matrix-vector products, never the circuit function again.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, Union

import numpy as np
from numpy.typing import NDArray

from ..errors import CircuitError, UnsatisfiedConstraint
from ..groth16 import BN128, R1CS, Curve, FieldVector, SparseMatrix, Synthesized, Witness, from_ints, to_ints

__all__ = [
    "Assignment",
    "Circuit",
    "CompiledCircuit",
    "ConstraintSystem",
    "LinearCombination",
    "compile_circuit",
]

Term = Union["LinearCombination", int]
Hint = Callable[["Assignment"], int]
BlockHint = Callable[["Assignment"], Sequence[int]]
InputValue = int | Sequence[int]
ObjectArray = NDArray[np.object_]

_ONE, _PUBLIC, _PRIVATE, _AUX = 0, 1, 2, 3


class LinearCombination:
    """A sum of ``coefficient * variable`` over a prime field; variable 0 is the constant one.

    Invariant: coefficients are reduced modulo ``p`` and none is zero.
    """

    __slots__ = ("p", "terms")

    def __init__(self, terms: dict[int, int], p: int) -> None:
        self.terms = terms
        self.p = p

    def _coerce(self, other: Term) -> LinearCombination:
        if isinstance(other, LinearCombination):
            return other
        if isinstance(other, int):
            value = other % self.p
            return LinearCombination({0: value} if value else {}, self.p)
        return NotImplemented

    def _combine(self, other: LinearCombination, sign: int) -> LinearCombination:
        p = self.p
        terms = dict(self.terms)
        for var, coeff in other.terms.items():
            value = (terms.get(var, 0) + sign * coeff) % p
            if value:
                terms[var] = value
            else:
                terms.pop(var, None)
        return LinearCombination(terms, p)

    def __add__(self, other: Term) -> LinearCombination:
        return self._combine(self._coerce(other), 1)

    __radd__ = __add__

    def __sub__(self, other: Term) -> LinearCombination:
        return self._combine(self._coerce(other), -1)

    def __rsub__(self, other: Term) -> LinearCombination:
        return self._coerce(other)._combine(self, -1)

    def __neg__(self) -> LinearCombination:
        return LinearCombination({v: (-c) % self.p for v, c in self.terms.items()}, self.p)

    def __mul__(self, k: int) -> LinearCombination:
        if not isinstance(k, int):
            return NotImplemented  # a product of two signals needs a constraint: use ConstraintSystem.mul
        k %= self.p
        if k == 0:
            return LinearCombination({}, self.p)
        return LinearCombination({v: c * k % self.p for v, c in self.terms.items()}, self.p)

    __rmul__ = __mul__

    def __repr__(self) -> str:
        return f"LinearCombination({self.terms})"


class Assignment:
    """The values known so far while a job's witness is computed; hints read them with ``v[lc]``."""

    __slots__ = ("p", "values")

    def __init__(self, values: list[int], p: int) -> None:
        self.values = values
        self.p = p

    def __getitem__(self, lc: Term) -> int:
        if isinstance(lc, int):
            return lc % self.p
        values = self.values
        return sum(values[v] * c for v, c in lc.terms.items()) % self.p


class Circuit(Protocol):
    """Anything with ``synthesize(cs)``; a plain function ``f(cs)`` is accepted too."""

    def synthesize(self, cs: ConstraintSystem) -> None: ...


@dataclass
class _Matrix:
    rows: list[int] = field(default_factory=list)
    cols: list[int] = field(default_factory=list)
    coeffs: list[int] = field(default_factory=list)

    def add_row(self, row: int, lc: LinearCombination) -> None:
        self.rows.extend([row] * len(lc.terms))
        self.cols.extend(lc.terms.keys())
        self.coeffs.extend(lc.terms.values())


@dataclass(frozen=True)
class _Step:
    first: int  # index of the first variable the hint fills
    count: int
    hint: Hint | BlockHint
    block: bool


class ConstraintSystem:
    """Collects a circuit's variables, hints and constraints while its function runs once."""

    def __init__(self, curve: Curve = BN128) -> None:
        self.curve = curve
        self.p = curve.r
        self._kinds: list[int] = [_ONE]
        self._input_names: dict[str, list[int]] = {}
        self._steps: list[_Step] = []
        self._a, self._b, self._c = _Matrix(), _Matrix(), _Matrix()
        # Each distinct linear combination object used in a constraint, once: a gadget often uses one
        # combination several times (an S-box input is in A and B of x^2 and in B of x^5), and a job
        # evaluates it once. Holding the objects keeps their ids unique while the circuit is built.
        self._unique: list[LinearCombination] = []
        self._unique_of: dict[int, int] = {}
        self._uses: tuple[list[int], list[int], list[int]] = ([], [], [])
        self._names: list[str] = []
        self._prefix: list[str] = []

    @property
    def one(self) -> LinearCombination:
        """The constant 1."""
        return LinearCombination({0: 1}, self.p)

    @property
    def n_constraints(self) -> int:
        """Constraints enforced so far."""
        return len(self._names)

    def constant(self, value: int) -> LinearCombination:
        """The constant ``value``."""
        return self.one * value

    @contextlib.contextmanager
    def namespace(self, name: str) -> Iterator[None]:
        """Prefix the names of the constraints enforced inside with ``name/``."""
        self._prefix.append(name)
        try:
            yield
        finally:
            self._prefix.pop()

    def _new(self, kind: int) -> LinearCombination:
        self._kinds.append(kind)
        return LinearCombination({len(self._kinds) - 1: 1}, self.p)

    def _declare(self, name: str, n: int | None, kind: int) -> list[LinearCombination]:
        if name in self._input_names:
            raise CircuitError(f"input {name!r} is declared twice")
        lcs = [self._new(kind) for _ in range(1 if n is None else n)]
        self._input_names[name] = [next(iter(lc.terms)) for lc in lcs]
        return lcs

    def public_input(self, name: str) -> LinearCombination:
        """A public input (part of public.json, in declaration order)."""
        return self._declare(name, None, _PUBLIC)[0]

    def public_inputs(self, name: str, n: int) -> list[LinearCombination]:
        """An array of ``n`` public inputs, given in a job's inputs as a list under ``name``."""
        return self._declare(name, n, _PUBLIC)

    def private_input(self, name: str) -> LinearCombination:
        """A private input, given in a job's inputs under ``name``."""
        return self._declare(name, None, _PRIVATE)[0]

    def private_inputs(self, name: str, n: int) -> list[LinearCombination]:
        """An array of ``n`` private inputs, given in a job's inputs as a list under ``name``."""
        return self._declare(name, n, _PRIVATE)

    def alloc(self, name: str, hint: Hint) -> LinearCombination:
        """An internal signal whose value ``hint`` computes from the values assigned before it."""
        lc = self._new(_AUX)
        self._steps.append(_Step(len(self._kinds) - 1, 1, hint, False))
        return lc

    def alloc_many(self, name: str, n: int, hint: BlockHint) -> list[LinearCombination]:
        """``n`` internal signals computed together by one hint (which returns ``n`` values)."""
        first = len(self._kinds)
        lcs = [self._new(_AUX) for _ in range(n)]
        self._steps.append(_Step(first, n, hint, True))
        return lcs

    def enforce(self, a: Term, b: Term, c: Term, name: str) -> None:
        """Add the constraint ``a * b = c``, reported as ``name`` (under the current namespace) if unmet."""
        row = len(self._names)
        for matrix, uses, term in zip((self._a, self._b, self._c), self._uses, (a, b, c), strict=True):
            lc = self._lc(term, name)
            matrix.add_row(row, lc)
            index = self._unique_of.get(id(lc))
            if index is None:
                index = self._unique_of[id(lc)] = len(self._unique)
                self._unique.append(lc)
            uses.append(index)
        self._names.append("/".join([*self._prefix, name]) if self._prefix else name)

    def _lc(self, term: Term, name: str) -> LinearCombination:
        if isinstance(term, LinearCombination):
            return term
        if isinstance(term, int):
            return self.constant(term)
        raise CircuitError(
            f"constraint {name!r}: expected a linear combination or an int, got {type(term).__name__}"
        )

    # Gadgets every circuit needs.

    def mul(self, a: Term, b: Term, name: str) -> LinearCombination:
        """A new signal equal to ``a * b`` (one constraint)."""
        out = self.alloc(name, lambda v: v[a] * v[b])
        self.enforce(a, b, out, name)
        return out

    def assert_equal(self, a: Term, b: Term, name: str) -> None:
        """Constrain ``a == b`` (one constraint)."""
        self.enforce(a, self.one, b, name)

    def assert_boolean(self, bit: Term, name: str) -> None:
        """Constrain ``bit`` to 0 or 1: ``bit * (1 - bit) = 0``."""
        self.enforce(bit, self.one - bit, 0, name)

    def to_bits(self, value: Term, n: int, name: str) -> list[LinearCombination]:
        """The ``n`` little-endian bits of ``value``, each constrained boolean, recomposing to ``value``.

        Also a range check: it is unsatisfiable unless ``0 <= value < 2**n``. ``n + 1`` constraints.
        """
        if not 0 < n < self.p.bit_length():
            raise CircuitError(f"to_bits({name}): {n} bits does not fit the field")
        bits = self.alloc_many(name, n, lambda v: [(v[value] >> i) & 1 for i in range(n)])
        with self.namespace(name):
            for i, bit in enumerate(bits):
                self.assert_boolean(bit, f"bit[{i}]")
            total = LinearCombination({}, self.p)
            for i, bit in enumerate(bits):
                total = total + bit * (1 << i)
            self.assert_equal(total, value, "recompose")
        return bits

    def range_check(self, value: Term, n: int, name: str) -> None:
        """Constrain ``0 <= value < 2**n`` (``n + 1`` constraints)."""
        self.to_bits(value, n, name)

    def compile(self) -> CompiledCircuit:
        """Freeze what was collected into a reusable evaluator."""
        return CompiledCircuit._from_system(self)


def compile_circuit(
    circuit: Circuit | Callable[[ConstraintSystem], None], curve: Curve = BN128
) -> CompiledCircuit:
    """Run ``circuit`` once over a fresh ConstraintSystem and compile it."""
    cs = ConstraintSystem(curve)
    if callable(circuit):
        circuit(cs)
    else:
        circuit.synthesize(cs)
    return cs.compile()


@dataclass(frozen=True, eq=False)
class _EvalMatrix:
    """One of A, B, C in row-sorted form for the per-job product with the witness."""

    cols: NDArray[np.int64]
    coeffs: ObjectArray
    starts: NDArray[np.int64]  # first entry of each non-empty row
    nonempty: NDArray[np.int64]  # the non-empty rows

    @classmethod
    def build(cls, rows: NDArray[np.int64], cols: NDArray[np.int64], coeffs: list[int]) -> _EvalMatrix:
        order = np.argsort(rows, kind="stable")
        rows, cols = rows[order], cols[order]
        obj = np.empty(len(coeffs), dtype=object)
        # Repeated gadgets repeat their coefficients: share one int object per distinct value.
        interned: dict[int, int] = {}
        obj[:] = [interned.setdefault(c, c) for c in coeffs]
        obj = obj[order]
        nonempty, starts = np.unique(rows, return_index=True)
        return cls(cols, obj, starts.astype(np.int64), nonempty.astype(np.int64))

    def times(self, w: ObjectArray, n_rows: int, p: int) -> ObjectArray:
        out: ObjectArray = np.zeros(n_rows, dtype=object)
        if len(self.cols):
            out[self.nonempty] = np.add.reduceat(self.coeffs * w[self.cols], self.starts)
        reduced: ObjectArray = out % p
        return reduced


@dataclass(frozen=True, eq=False)
class _Evaluator:
    """A·w, B·w, C·w from each distinct linear combination evaluated once, then gathered per row."""

    unique: _EvalMatrix
    n_unique: int
    uses: tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]

    @classmethod
    def build(cls, cs: ConstraintSystem, wire_of: NDArray[np.int64]) -> _Evaluator:
        m = _Matrix()
        for index, lc in enumerate(cs._unique):
            m.add_row(index, lc)
        rows = np.asarray(m.rows, dtype=np.int64)
        cols = wire_of[np.asarray(m.cols, dtype=np.int64)] if m.cols else np.zeros(0, dtype=np.int64)
        uses = tuple(np.asarray(u, dtype=np.int64) for u in cs._uses)
        return cls(_EvalMatrix.build(rows, cols, m.coeffs), len(cs._unique), (uses[0], uses[1], uses[2]))

    def times(self, w: ObjectArray, p: int) -> tuple[ObjectArray, ObjectArray, ObjectArray]:
        values = self.unique.times(w, self.n_unique, p)
        a, b, c = (values[u] for u in self.uses)
        return a, b, c


class CompiledCircuit:
    """A circuit compiled once: its R1CS, its constraint names, and the hints that compute a witness.

    Wires follow circom's order: 0 is the constant one, then the public inputs, the private inputs and the
    internal signals, each in declaration order.
    """

    def __init__(
        self,
        curve: Curve,
        r1cs: R1CS,
        constraint_names: list[str],
        inputs: dict[str, list[int]],
        public_names: list[str],
        steps: list[_Step],
        wire_of: NDArray[np.int64],
        evaluator: _Evaluator,
    ) -> None:
        self.curve = curve
        self.r1cs = r1cs
        self.constraint_names = constraint_names
        self.public_names = public_names
        self._inputs = inputs  # input name -> internal variable indexes
        self._steps = steps
        self._wire_of = wire_of  # internal variable index -> wire index
        self._evaluator = evaluator

    @property
    def n_constraints(self) -> int:
        """Number of constraints."""
        return self.r1cs.n_constraints

    @property
    def n_wires(self) -> int:
        """Number of wires, the constant one included."""
        return self.r1cs.n_wires

    @property
    def n_public(self) -> int:
        """Number of public signals (public.json's length)."""
        return self.r1cs.n_public

    @classmethod
    def _from_system(cls, cs: ConstraintSystem) -> CompiledCircuit:
        kinds = np.asarray(cs._kinds, dtype=np.int64)
        order = np.argsort(kinds, kind="stable")  # one, public, private, aux; declaration order within
        wire_of = np.empty_like(order)
        wire_of[order] = np.arange(len(order), dtype=np.int64)
        n_constraints = len(cs._names)
        mats = []
        for m in (cs._a, cs._b, cs._c):
            rows = np.asarray(m.rows, dtype=np.int64)
            cols = wire_of[np.asarray(m.cols, dtype=np.int64)] if m.cols else np.zeros(0, dtype=np.int64)
            mats.append(SparseMatrix(rows, cols, from_ints(m.coeffs)))
        counts = np.bincount(kinds, minlength=4)
        r1cs = R1CS(
            curve=cs.curve,
            n_wires=len(kinds),
            n_pub_out=0,
            n_pub_in=int(counts[_PUBLIC]),
            n_prv_in=int(counts[_PRIVATE]),
            n_constraints=n_constraints,
            a=mats[0],
            b=mats[1],
            c=mats[2],
            n_labels=len(kinds),
        )
        public_names = [
            name if len(idx) == 1 else f"{name}[{i}]"
            for name, idx in cs._input_names.items()
            if kinds[idx[0]] == _PUBLIC
            for i in range(len(idx))
        ]
        return cls(
            cs.curve,
            r1cs,
            list(cs._names),
            dict(cs._input_names),
            public_names,
            list(cs._steps),
            wire_of,
            _Evaluator.build(cs, wire_of),
        )

    def witness_values(self, inputs: Mapping[str, InputValue], check: bool = True) -> list[int]:
        """Every wire's value for ``inputs`` (wire order); checks each constraint unless ``check`` is False.

        Raises CircuitError for a missing or unknown input, UnsatisfiedConstraint naming the first
        constraint the values break.
        """
        p = self.curve.r
        values: list[int] = [0] * len(self._wire_of)
        values[0] = 1
        self._assign_inputs(values, inputs)
        assignment = Assignment(values, p)
        for step in self._steps:
            if step.block:
                out = step.hint(assignment)
                assert not isinstance(out, int)
                if len(out) != step.count:
                    raise CircuitError(f"a hint returned {len(out)} values: expected {step.count}")
                values[step.first : step.first + step.count] = [x % p for x in out]
            else:
                value = step.hint(assignment)
                assert isinstance(value, int)
                values[step.first] = value % p
        wires = [0] * len(values)
        for internal, wire in enumerate(self._wire_of.tolist()):
            wires[wire] = values[internal]
        if check:
            self.check(wires)
        return wires

    def _assign_inputs(self, values: list[int], inputs: Mapping[str, InputValue]) -> None:
        unknown = sorted(set(inputs) - set(self._inputs))
        if unknown:
            raise CircuitError(f"unknown input(s): {', '.join(unknown)}")
        for name, indexes in self._inputs.items():
            if name not in inputs:
                raise CircuitError(f"missing input {name!r}")
            given = inputs[name]
            items = [given] if isinstance(given, int) else list(given)
            if len(items) != len(indexes):
                raise CircuitError(f"input {name!r} has {len(items)} values: expected {len(indexes)}")
            for index, item in zip(indexes, items, strict=True):
                values[index] = int(item) % self.curve.r

    def evaluate(self, wires: Sequence[int]) -> tuple[ObjectArray, ObjectArray, ObjectArray]:
        """The vectors A·w, B·w, C·w (object arrays of Python ints, reduced)."""
        if len(wires) != self.n_wires:
            raise CircuitError(f"the witness has {len(wires)} values: the circuit has {self.n_wires} wires")
        w: ObjectArray = np.empty(len(wires), dtype=object)
        w[:] = list(wires)
        return self._evaluator.times(w, self.curve.r)

    def check(self, wires: Sequence[int]) -> None:
        """Raise UnsatisfiedConstraint for the first constraint ``wires`` break."""
        self._check(*self.evaluate(wires))

    def _check(self, a: ObjectArray, b: ObjectArray, c: ObjectArray) -> None:
        bad = np.flatnonzero((a * b - c) % self.curve.r)
        if len(bad):
            index = int(bad[0])
            raise UnsatisfiedConstraint(
                self.constraint_names[index],
                index,
                f"A·w = {a[index]}, B·w = {b[index]}, C·w = {c[index]}",
            )

    def public_values(self, wires: Sequence[int]) -> list[int]:
        """The public signals of a full assignment (public.json's values)."""
        return list(wires[1 : 1 + self.n_public])

    def witness(self, inputs: Mapping[str, InputValue], check: bool = True) -> Witness:
        """The witness for ``inputs`` (see ``witness_values``)."""
        return Witness(self.curve, _field_vector(self.witness_values(inputs, check)))

    def synthesize(self, source: Mapping[str, InputValue] | Witness) -> Synthesized:
        """The witness and its A·w, B·w, C·w from the cached matrices, checked constraint by constraint.

        ``source`` is either the circuit's inputs or a ready witness. The result has the prover's row
        layout (the constraints, then one A row per public signal and the constant wire), the same as
        ``groth16.synthesize(self.r1cs, witness)`` gives without rebuilding the matrices.
        """
        if isinstance(source, Witness):
            if source.curve != self.curve:
                raise CircuitError(f"the witness is on {source.curve.name}, the circuit on {self.curve.name}")
            wires = to_ints(source.values)
        else:
            wires = self.witness_values(source, check=False)
        a, b, c = self.evaluate(wires)
        self._check(a, b, c)
        extra = self.n_public + 1
        a_full = np.concatenate([a, np.array(wires[:extra], dtype=object)])
        zeros = np.zeros(extra, dtype=object)
        b_full, c_full = np.concatenate([b, zeros]), np.concatenate([c, zeros])
        values = source.values if isinstance(source, Witness) else _field_vector(wires)
        return Synthesized(
            self.curve,
            self.n_public,
            values,
            _field_vector(a_full.tolist()),
            _field_vector(b_full.tolist()),
            _field_vector(c_full.tolist()),
        )


def _field_vector(values: list[int]) -> FieldVector:
    """``groth16.from_ints`` for reduced values, without a generator per element."""
    little: Literal["little"] = "little"
    raw = b"".join(map(int.to_bytes, values, itertools.repeat(32), itertools.repeat(little)))
    return np.frombuffer(raw, dtype="<u8").reshape(-1, 4).astype(np.uint64, copy=True)
