"""Groth16 proving, split the way a device prover splits it.

``synthesize`` (CPU: the witness and the A·w, B·w, C·w vectors) -> ``prove_start`` (H by NTT and the G1
MSMs: the section a device lock covers) -> ``prove_finish`` (the G2 MSM and assembly). Every value that
crosses a process boundary holds numpy arrays and a few integers only.

Where the C extension computes a curve's MSMs (BN254, see ``_native``), they run over the key's own rows,
as they lie in the (memory-mapped) file: nothing is built, and the processes of a machine share one copy
of a key's points, the page cache's. Otherwise library point objects are needed, which cannot be pickled,
so each process builds a key's bases once (written raw from the key's bytes, see ``_rawpoints``) and keeps
them in a cache keyed by the key's digest. Either way a section is validated the first time its key is
seen: every point on the curve (on BN254 G1, cofactor 1, that is membership of the group) and, where the
group has a cofactor (BN254 G2, BLS12-381 G1 and G2), in the subgroup of order r. Sections that pass are
remembered by the key's digest (``_pointcheck``), so later loads skip the checks.
"""

from __future__ import annotations

import functools
import secrets
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from . import _pointcheck
from ._native import G1, G2, backend, cpu_threads
from ._ntt import coset_h
from ._sections import SectionCache
from .curves import Curve
from .errors import FormatError, InvalidWitnessError, KeyMismatchError
from .field import FieldVector, from_ints, to_ints
from .proof import Proof
from .r1cs import R1CS, SparseMatrix
from .witness import Witness
from .zkey import ProvingKey

__all__ = [
    "BASES",
    "DEVICE_SECTION_BASES",
    "FINALIZE_BASES",
    "ProvingState",
    "Synthesized",
    "assemble",
    "base_points",
    "blinding",
    "check_fit",
    "check_points",
    "check_subgroup",
    "first_off_curve_row",
    "loaded",
    "msm",
    "msm_scalars",
    "preload",
    "prove_b2",
    "prove_finish",
    "prove_start",
    "proving_state",
    "release",
    "release_digest",
    "section_rows",
    "synthesize",
]

BASES = ("a", "b1", "b2", "c", "h")
"""Every base section of a proving key."""
DEVICE_SECTION_BASES = ("a", "b1", "c", "h")
"""The G1 sections ``prove_start`` uses (the device section)."""
FINALIZE_BASES = ("b2",)
"""The G2 section ``prove_b2`` and ``prove_finish`` use (the finalizer)."""
_CACHED_KEYS = 4  # keys whose library points one process keeps


@dataclass(frozen=True, eq=False)
class Synthesized:
    """A witness and its A·w, B·w, C·w vectors over the key's rows (constraints, then one row per public
    signal and the constant wire). Invariant: ``a[i] * b[i] == c[i]`` for every row."""

    curve: Curve
    n_public: int
    witness: FieldVector
    a: FieldVector
    b: FieldVector
    c: FieldVector

    @property
    def public(self) -> tuple[int, ...]:
        """The public signals: witness[1..n_public]."""
        return tuple(to_ints(self.witness[1 : self.n_public + 1]))

    @property
    def nbytes(self) -> int:
        """Bytes held (what pickling copies)."""
        return int(self.witness.nbytes + self.a.nbytes + self.b.nbytes + self.c.nbytes)


@dataclass(frozen=True, eq=False)
class ProvingState:
    """The device section's output: the G1 MSM results and the blinding scalars ``r``, ``s``.

    Holds a reference to its key (pickling a state copies the key's arrays; within a process it is free).
    """

    key: ProvingKey
    witness: FieldVector
    public: tuple[int, ...]
    r: int
    s: int
    a: G1
    b1: G1
    c: G1
    h: G1

    @property
    def nbytes(self) -> int:
        """Bytes held apart from the key."""
        return int(self.witness.nbytes)


# -- synthesis ------------------------------------------------------------------------------------------


def synthesize(source: R1CS | ProvingKey, witness: Witness) -> Synthesized:
    """Compute A·w, B·w, C·w for ``witness``. With an R1CS, every constraint is checked and the first one
    that fails is named; a proving key holds only A and B, so C·w is taken as A·w ∘ B·w."""
    n_wires = source.n_wires if isinstance(source, R1CS) else source.n_vars
    if witness.curve != source.curve:
        raise InvalidWitnessError(
            f"the witness is on {witness.curve.name}, the circuit on {source.curve.name}"
        )
    if len(witness) != n_wires:
        raise InvalidWitnessError(f"the witness has {len(witness)} values, the circuit {n_wires} wires")
    r = source.curve.r
    be = backend(source.curve)
    if be.native and isinstance(source, ProvingKey):
        return _synthesize_native(source, witness)
    w = np.array(to_ints(witness.values), dtype=object)
    if n_wires and (w[0] != 1 or max(w) >= r):
        bad = "wire 0 (the constant one) is not 1" if w[0] != 1 else "a value is not below the field"
        raise InvalidWitnessError(f"invalid witness: {bad}")
    if isinstance(source, R1CS):
        return _synthesize_r1cs(source, witness, w)
    coef = source.coefficients
    n_rows = int(coef.row.max()) + 1 if coef.row.size else 0
    values = np.array(to_ints(coef.value), dtype=object)
    a = _matvec(coef.row[coef.matrix == 0], coef.wire[coef.matrix == 0], values[coef.matrix == 0], w, n_rows)
    b = _matvec(coef.row[coef.matrix == 1], coef.wire[coef.matrix == 1], values[coef.matrix == 1], w, n_rows)
    a, b = a % r, b % r
    c = a * b % r
    return Synthesized(source.curve, source.n_public, witness.values, _fv(a), _fv(b), _fv(c))


def _synthesize_native(key: ProvingKey, witness: Witness) -> Synthesized:
    values, coef = witness.values, key.coefficients
    if values.shape[0] and not (values[0, 0] == 1 and not values[0, 1:].any()):
        raise InvalidWitnessError("invalid witness: wire 0 (the constant one) is not 1")
    n_rows = int(coef.row.max()) + 1 if coef.row.size else 0
    try:
        a, b, c = backend(key.curve).synthesize_rows(
            coef.matrix, coef.row, coef.wire, coef.value, values, n_rows
        )
    except ValueError as exc:
        if "not below the field" in str(exc):
            raise InvalidWitnessError("invalid witness: a value is not below the field") from None
        raise
    return Synthesized(key.curve, key.n_public, values, a, b, c)


def _synthesize_r1cs(r1cs: R1CS, witness: Witness, w: NDArray[Any]) -> Synthesized:
    r, m = r1cs.curve.r, r1cs.n_constraints
    n_rows = m + r1cs.n_public + 1
    a, b, c = (_sparse(mat, w, n_rows) % r for mat in (r1cs.a, r1cs.b, r1cs.c))
    bad = np.flatnonzero((a[:m] * b[:m] - c[:m]) % r != 0)
    if bad.size:
        raise InvalidWitnessError(f"the witness does not satisfy constraint {int(bad[0])} (of {m})")
    a[m:] = w[: r1cs.n_public + 1]  # one extra A row per public signal and the constant wire, as snarkjs
    return Synthesized(r1cs.curve, r1cs.n_public, witness.values, _fv(a), _fv(b), _fv(c))


def _sparse(mat: SparseMatrix, w: NDArray[Any], n_rows: int) -> NDArray[Any]:
    return _matvec(mat.rows, mat.cols, np.array(to_ints(mat.values), dtype=object), w, n_rows)


def _matvec(
    rows: NDArray[np.int64], cols: NDArray[np.int64], values: NDArray[Any], w: NDArray[Any], n_rows: int
) -> NDArray[Any]:
    acc = np.zeros(n_rows, dtype=object)
    np.add.at(acc, rows, values * w[cols])
    return acc


def _fv(values: NDArray[Any]) -> FieldVector:
    return from_ints(values.tolist())


# -- the per-process cache of library points ------------------------------------------------------------


@dataclass(frozen=True)
class SectionPoints:
    """One base section as this process computes with it, checked once per key: the section's own rows
    (where the C extension does the MSMs: a view of the key, nothing copied), or library points."""

    index: NDArray[np.int64]  # rows of the key's section that are not at infinity (library points)
    points: list[Any]  # library points of those rows (empty where ``rows`` is set)
    rows: NDArray[np.uint8] | None = None  # the section's rows, for the C extension's MSM


_CACHE: SectionCache[SectionPoints] = SectionCache(_CACHED_KEYS, "loaded in this process")


def section_rows(key: ProvingKey, name: str) -> NDArray[np.uint8]:
    rows: NDArray[np.uint8] = getattr(key, f"{name}_points")
    return rows


def base_points(
    curve: Curve,
    digest: str,
    name: str,
    rows: NDArray[np.uint8] | None,
    *,
    subgroup_rounds: int | None = None,
) -> SectionPoints:
    """The cached points of one base section; ``rows=None`` means "must be cached" (else LookupError).

    ``subgroup_rounds`` (two processes sharing a key's checks): another process checks these rows on the
    curve (``first_off_curve_row``), runs the other rounds of the subgroup test (``check_subgroup``) and
    remembers the section once everything passed; here only this many rounds of the subgroup test run (a
    failure raises) and nothing is remembered. Points cached this way passed those rounds."""

    def build(rows: NDArray[np.uint8]) -> SectionPoints:
        if backend(curve).native_msm:
            _check_rows(curve, digest, name, rows, subgroup_rounds)
            return SectionPoints(_NO_INDEX, [], rows)
        index = np.flatnonzero(rows.any(axis=1))
        return SectionPoints(index, _checked_points(curve, digest, name, rows, index, subgroup_rounds))

    return _CACHE.get(digest, name, None if rows is None else functools.partial(build, rows))


_NO_INDEX = np.zeros(0, dtype=np.int64)


def _check_rows(
    curve: Curve, digest: str, name: str, rows: NDArray[np.uint8], subgroup_rounds: int | None = None
) -> None:
    """Validate the rows of a section with the C extension (all-zero rows, the point at infinity, pass),
    unless remembered; ``subgroup_rounds`` as for ``base_points``. FormatError names the first bad point."""
    if _pointcheck.known(digest, name):
        return
    group = 2 if name.startswith("b2") else 1
    be, shared = backend(curve), subgroup_rounds is not None
    if not shared:
        off = be.first_off_curve_rows(rows, group)
        if off is not None:
            raise _bad_point(digest, name, off, "is not on the curve")
    if not (group == 1 and curve.name == "bn128"):  # on BN254 G1 (cofactor 1) on the curve is in the group
        outside = be.rows_outside_subgroup(rows, group, subgroup_rounds)
        if outside is not None:
            raise _bad_point(digest, name, outside, f"is not in the subgroup of order r of G{group}")
    if not shared:
        _pointcheck.remember(digest, name)


def _checked_points(
    curve: Curve,
    digest: str,
    name: str,
    rows: NDArray[np.uint8],
    index: NDArray[np.int64],
    subgroup_rounds: int | None = None,
) -> list[Any]:
    """Library points of ``rows[index]``, validated (see the module's docstring; ``subgroup_rounds``: see
    ``base_points``); FormatError names the first bad point by its row in the key's section."""
    group = 2 if name.startswith("b2") else 1
    be, picked = backend(curve), rows[index]
    remembered = _pointcheck.known(digest, name)
    shared = subgroup_rounds is not None  # another process does the rest of the checks
    if not remembered and not shared:
        if be.native:
            off = be.first_off_curve_rows(picked, group)
        else:
            off = _pointcheck.first_off_curve(curve, picked, group)
        if off is not None:
            raise _bad_point(digest, name, int(index[off]), "is not on the curve")
    try:
        points = be.bases(picked, group)
    except ValueError as exc:  # the validating fallback names the row in its message
        raise FormatError(f"proving key {digest[:12]}", f"section {name}: {exc}") from None
    if not remembered:
        cofactor_one = group == 1 and curve.name == "bn128"  # on the curve is in the group
        outside = None if cofactor_one else be.outside_subgroup(points, group, subgroup_rounds)
        if outside is not None:
            raise _bad_point(
                digest, name, int(index[outside]), f"is not in the subgroup of order r of G{group}"
            )
        if not shared:
            _pointcheck.remember(digest, name)
    return points


def _bad_point(digest: str, name: str, row_in_slice: int, problem: str) -> FormatError:
    row = row_in_slice + (int(name.split("[")[1].split(":")[0]) if "[" in name else 0)
    return FormatError(f"proving key {digest[:12]}", f"section {name.split('[')[0]}: point {row} {problem}")


def check_subgroup(curve: Curve, digest: str, name: str, rows: NDArray[np.uint8], rounds: int) -> None:
    """Raise FormatError (as a load would) when ``rounds`` rounds of the subgroup test find a point of the
    section slice ``name`` (on the curve, checked first) outside the subgroup; builds its points for that
    only, without keeping them."""
    index = np.flatnonzero(rows.any(axis=1))
    group = 2 if name.startswith("b2") else 1
    be = backend(curve)
    outside = be.outside_subgroup(be.bases(rows[index], group), group, rounds)
    if outside is not None:
        raise _bad_point(digest, name, int(index[outside]), f"is not in the subgroup of order r of G{group}")


def first_off_curve_row(curve: Curve, digest: str, name: str, rows: NDArray[np.uint8]) -> None:
    """Raise FormatError (as a load would) when a point of the section slice ``name`` is off the curve."""
    index = np.flatnonzero(rows.any(axis=1))
    off = _pointcheck.first_off_curve(curve, rows[index], 2 if name.startswith("b2") else 1)
    if off is not None:
        raise _bad_point(digest, name, int(index[off]), "is not on the curve")


def check_points(key: ProvingKey) -> None:
    """Validate every base point of ``key`` in full now and remember it, without keeping the points (what
    the first load of each section would do; a daemon runs it when a circuit is registered)."""
    for name in BASES:
        rows = section_rows(key, name)
        if backend(key.curve).native_msm:
            _check_rows(key.curve, key.digest, name, rows)
        else:
            _checked_points(key.curve, key.digest, name, rows, np.flatnonzero(rows.any(axis=1)))


def preload(key: ProvingKey, parts: tuple[str, ...] = BASES) -> None:
    """Build this process's library points for ``parts`` of ``key`` now (otherwise the first proof pays for
    it)."""
    for name in parts:
        base_points(key.curve, key.digest, name, section_rows(key, name))


def release(key: ProvingKey) -> None:
    """Drop this process's library points for ``key``."""
    release_digest(key.digest)


def release_digest(digest: str) -> None:
    """Drop this process's library points of the key with ``digest``."""
    _CACHE.release(digest)


def msm(
    curve: Curve,
    digest: str,
    name: str,
    rows: NDArray[np.uint8] | None,
    scalars: FieldVector,
    *,
    threads: int | None = None,
) -> G1 | G2:
    """MSM over one base section (affine coordinates), skipping bases at infinity and zero scalars;
    ``threads``: the C extension's threads (default: every core this process may use)."""
    bases = base_points(curve, digest, name, rows)
    be, group = backend(curve), 2 if name.startswith("b2") else 1
    if bases.rows is not None:
        return be.msm_rows(bases.rows, scalars, group, threads or cpu_threads())
    picked = scalars[bases.index]
    keep = np.flatnonzero(picked.any(axis=1))
    points = bases.points if keep.size == len(bases.points) else [bases.points[i] for i in keep.tolist()]
    point = be.msm(points, picked[keep], group)
    return be.g1_xy(point) if group == 1 else be.g2_xy(point)


def msm_scalars(key: ProvingKey, name: str, witness: FieldVector, h: FieldVector | None) -> FieldVector:
    if name == "h":
        assert h is not None
        return h
    return witness[key.n_public + 1 :] if name == "c" else witness


# -- proving --------------------------------------------------------------------------------------------


def check_fit(key: ProvingKey, synthesized: Synthesized) -> None:
    if synthesized.curve != key.curve:
        raise KeyMismatchError(f"the witness is on {synthesized.curve.name}, the key on {key.curve.name}")
    if synthesized.witness.shape[0] != key.n_vars:
        raise InvalidWitnessError(
            f"the witness has {synthesized.witness.shape[0]} values, the key expects {key.n_vars}"
        )
    if synthesized.a.shape[0] > key.domain_size:
        raise KeyMismatchError(f"{synthesized.a.shape[0]} rows do not fit the key's domain {key.domain_size}")


def blinding(curve: Curve, randomness: tuple[int, int] | None) -> tuple[int, int]:
    if randomness is not None:
        return randomness[0] % curve.r, randomness[1] % curve.r
    return secrets.randbelow(curve.r), secrets.randbelow(curve.r)


def prove_start(
    key: ProvingKey,
    synthesized: Synthesized,
    *,
    randomness: tuple[int, int] | None = None,
    threads: int | None = None,
) -> ProvingState:
    """H by NTT and the G1 MSMs (A, B1, C, H), in this process. ``randomness`` fixes ``(r, s)`` (tests);
    ``threads``: the C extension's threads (default: every core this process may use)."""
    check_fit(key, synthesized)
    be = backend(key.curve)
    h = coset_h(be, synthesized.a, synthesized.b, synthesized.c, key.domain_size, threads=threads)
    out: dict[str, G1] = {}
    for name in DEVICE_SECTION_BASES:
        scalars = msm_scalars(key, name, synthesized.witness, h)
        out[name] = msm(key.curve, key.digest, name, section_rows(key, name), scalars, threads=threads)  # type: ignore[assignment]
    r, s = blinding(key.curve, randomness)
    return ProvingState(
        key, synthesized.witness, synthesized.public, r, s, out["a"], out["b1"], out["c"], out["h"]
    )


def prove_b2(key: ProvingKey, witness: FieldVector, *, threads: int | None = None) -> G2:
    """The G2 MSM (B2) alone: it needs only the witness, so it can run beside ``prove_start``."""
    return msm(key.curve, key.digest, "b2", key.b2_points, witness, threads=threads)  # type: ignore[return-value]


def prove_finish(state: ProvingState, *, b2: G2 | None = None, threads: int | None = None) -> Proof:
    """The G2 MSM (B2, unless ``b2`` is given: ``prove_b2`` of the same key and witness) and the assembly of
    the proof; ``threads`` as for ``prove_start``."""
    return assemble(state, prove_b2(state.key, state.witness, threads=threads) if b2 is None else b2)


def assemble(state: ProvingState, b2_msm: G2) -> Proof:
    key, be, r, s = state.key, backend(state.key.curve), state.r, state.s
    delta1 = be.g1(key.delta1, trusted=True)
    pi_a = be.g1(key.alpha1, trusted=True) + be.g1(state.a, trusted=True) + be.mul(delta1, r)
    pi_b = (
        be.g2(key.beta2, trusted=True)
        + be.g2(b2_msm, trusted=True)
        + be.mul(be.g2(key.delta2, trusted=True), s)
    )
    b1 = be.g1(key.beta1, trusted=True) + be.g1(state.b1, trusted=True) + be.mul(delta1, s)
    pi_c = be.g1(state.c, trusted=True) + be.g1(state.h, trusted=True)
    pi_c = pi_c + be.mul(pi_a, s) + be.mul(b1, r) - be.mul(delta1, r * s)
    return Proof(key.curve, be.g1_xy(pi_a), be.g2_xy(pi_b), be.g1_xy(pi_c), state.public)


def loaded(key: ProvingKey, parts: tuple[str, ...] = BASES) -> bool:
    """Whether this process holds the library points of ``parts`` of ``key``."""
    return all(_CACHE.holds(key.digest, name) for name in parts)


def proving_state(
    key: ProvingKey, synthesized: Synthesized, randomness: tuple[int, int], g1: dict[str, G1]
) -> ProvingState:
    r, s = randomness
    return ProvingState(
        key, synthesized.witness, synthesized.public, r, s, g1["a"], g1["b1"], g1["c"], g1["h"]
    )
