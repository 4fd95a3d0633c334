"""Groth16 proving, split the way a device prover splits it.

``synthesize`` (CPU: the witness and the A·w, B·w, C·w vectors) -> ``prove_start`` (H by NTT and the G1
MSMs: the section a device lock covers) -> ``prove_finish`` (the G2 MSM and assembly). Every value that
crosses a process boundary holds numpy arrays and a few integers only.

The arithmetic is this process's choice for the key's curve (``arithmetic``: the C extension over the key's
rows, or the libraries over point objects); nothing here asks which. A base section is validated the first
time its key is seen in a process (every point on the curve and, where the group has a cofactor, in the
subgroup of order r), and kept in a cache of this process's last few keys; sections that pass are
remembered by the key's digest (``_pointcheck``), so later loads, here or in another process, skip the
checks.
"""

from __future__ import annotations

import functools
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from . import _pointcheck, _tablecache
from ._sections import SectionCache
from .adapters import library
from .arithmetic import Arithmetic, Section, arithmetic, cpu_threads
from .arithmetic.libraries import matvec
from .curves import Curve
from .errors import FormatError, InvalidWitnessError, KeyMismatchError
from .field import FieldVector, from_ints, to_ints
from .points import G1, G2, BadPoint
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
    "blinding",
    "check_fit",
    "check_points",
    "key_table_bytes",
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
    "tables_folder",
    "tables_not_storable",
    "tabulated",
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
    values = witness.values
    if values.shape[0] and not (values[0, 0] == 1 and not values[0, 1:].any()):
        raise InvalidWitnessError("invalid witness: wire 0 (the constant one) is not 1")
    if isinstance(source, R1CS):
        return _synthesize_r1cs(source, witness)
    coef = source.coefficients
    n_rows = int(coef.row.max()) + 1 if coef.row.size else 0
    a, b, c = arithmetic(source.curve).synthesize(
        coef.matrix, coef.row, coef.wire, coef.value, witness, n_rows
    )
    return Synthesized(source.curve, source.n_public, values, a, b, c)


def _synthesize_r1cs(r1cs: R1CS, witness: Witness) -> Synthesized:
    r, m = r1cs.curve.r, r1cs.n_constraints
    w = np.array(to_ints(witness.values), dtype=object)
    if w.size and max(w) >= r:
        raise InvalidWitnessError("invalid witness: a value is not below the field")
    n_rows = m + r1cs.n_public + 1
    a, b, c = (_sparse(mat, w, n_rows) % r for mat in (r1cs.a, r1cs.b, r1cs.c))
    bad = np.flatnonzero((a[:m] * b[:m] - c[:m]) % r != 0)
    if bad.size:
        raise InvalidWitnessError(f"the witness does not satisfy constraint {int(bad[0])} (of {m})")
    a[m:] = w[: r1cs.n_public + 1]  # one extra A row per public signal and the constant wire, as snarkjs
    return Synthesized(r1cs.curve, r1cs.n_public, witness.values, _fv(a), _fv(b), _fv(c))


def _sparse(mat: SparseMatrix, w: NDArray[Any], n_rows: int) -> NDArray[Any]:
    return matvec(mat.rows, mat.cols, np.array(to_ints(mat.values), dtype=object), w, n_rows)


def _fv(values: NDArray[Any]) -> FieldVector:
    return from_ints(values.tolist())


# -- the per-process cache of sections ------------------------------------------------------------------

_CACHE: SectionCache[Section] = SectionCache(_CACHED_KEYS, "loaded in this process")


def section_rows(key: ProvingKey, name: str) -> NDArray[np.uint8]:
    rows: NDArray[np.uint8] = getattr(key, f"{name}_points")
    return rows


def _group(name: str) -> int:
    return 2 if name.startswith("b2") else 1


def _load(curve: Curve, digest: str, name: str, rows: NDArray[np.uint8]) -> Section:
    """One base section, validated unless remembered (then remembered); FormatError names the first bad
    point by its row in the key's section."""
    checked = _pointcheck.known(digest, name)
    try:
        section = arithmetic(curve).section(rows, _group(name), checked=checked)
    except BadPoint as bad:
        row = bad.index + (int(name.split("[")[1].split(":")[0]) if "[" in name else 0)
        where = f"section {name.split('[')[0]}: point {row} {bad.problem}"
        raise FormatError(f"proving key {digest[:12]}", where) from None
    if not checked:
        _pointcheck.remember(digest, name)
    return section


def base_section(curve: Curve, digest: str, name: str, rows: NDArray[np.uint8] | None) -> Section:
    """The cached section ``name`` of the key ``digest``; ``rows=None`` means "must be cached" (else
    LookupError)."""
    return _CACHE.get(digest, name, None if rows is None else lambda: _load(curve, digest, name, rows))


def check_points(key: ProvingKey) -> None:
    """Validate every base point of ``key`` in full now and remember it, without keeping the sections (what
    the first load of each section would do; a daemon runs it when a circuit is registered)."""
    for name in BASES:
        _load(key.curve, key.digest, name, section_rows(key, name))


def preload(key: ProvingKey, parts: tuple[str, ...] = BASES, *, tables: bool | None = False) -> None:
    """Load (check, and for the libraries build the point objects of) ``parts`` of ``key`` in this process
    now (otherwise the first proof pays for it). ``tables`` (the C extension's fixed-base tables:
    ``key_table_bytes`` more memory, each MSM of the section faster; see docs/groth16.md): True maps the
    stored ones or builds, stores and maps them (``_tablecache``), None maps them only where they are
    stored already, False keeps the sections without. Kept and dropped with the sections."""
    arith = arithmetic(key.curve)
    for name in parts:
        section = base_section(key.curve, key.digest, name, section_rows(key, name))
        if tables is False or section.tables is not None:
            continue
        shape = arith.table_shape(len(section.rows))
        size = arith.table_bytes(section.group, len(section.rows))
        if shape is None or size == 0:
            continue
        if tables:
            build = functools.partial(_build_tables, arith)
            found: Section | None = _tablecache.stored_tables(
                section, key.digest, name, shape, size, build, arith.row_tables
            )
        else:
            found = _tablecache.cached_tables(section, key.digest, name, shape, size, arith.row_tables)
        if found is not None:
            _CACHE.replace(key.digest, name, section, found)


def _build_tables(arith: Arithmetic, section: Section) -> Section:
    return arith.tabulate(section, cpu_threads())


def tables_folder() -> Path | None:
    """Where fixed-base tables are stored (``$PROOFLANE_TABLES``, docs/config.md), or None where they are
    not (the variable set empty: each process keeps its own in memory)."""
    return _tablecache.folder()


def tables_not_storable() -> str | None:
    """Why fixed-base tables built now could not be stored for other processes to map (``$PROOFLANE_TABLES``
    set empty, or a folder this process cannot write); None where they can."""
    return _tablecache.not_storable()


def key_table_bytes(
    curve: Curve, wires: int, public: int, domain: int, parts: tuple[str, ...] = BASES
) -> int:
    """Bytes of the fixed-base tables ``preload(..., tables=True)`` builds for ``parts`` of a key of
    ``wires`` wires, ``public`` public signals and FFT domain ``domain`` (0 on the libraries)."""
    rows = {"a": wires, "b1": wires, "b2": wires, "c": wires - public - 1, "h": domain}
    return sum(arithmetic(curve).table_bytes(_group(name), rows[name]) for name in parts)


def release(key: ProvingKey) -> None:
    """Drop this process's sections of ``key``."""
    release_digest(key.digest)


def release_digest(digest: str) -> None:
    """Drop this process's sections of the key with ``digest``."""
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
    """MSM over one base section (affine coordinates); ``threads``: the threads of the C extension's call
    (default: ``cpu_threads()``)."""
    section = base_section(curve, digest, name, rows)
    return arithmetic(curve).msm(section, scalars, threads or cpu_threads())


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
    a, b, c = synthesized.a, synthesized.b, synthesized.c
    h = arithmetic(key.curve).coset_h(a, b, c, key.domain_size, threads or cpu_threads())
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
    key, be, r, s = state.key, library(state.key.curve), state.r, state.s
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
    """Whether this process holds the sections ``parts`` of ``key``."""
    return all(_CACHE.holds(key.digest, name) for name in parts)


def tabulated(key: ProvingKey, *, stored: bool = False) -> tuple[str, ...]:
    """The sections of ``key`` this process holds with fixed-base tables (``preload``'s ``tables``); with
    ``stored``, only those whose tables are mapped from the stored files (not built in memory)."""
    held = (name for name in BASES if _CACHE.holds(key.digest, name))
    sections = ((name, base_section(key.curve, key.digest, name, None)) for name in held)
    return tuple(
        name for name, s in sections if s.tables is not None and (not stored or _tablecache.is_stored(s))
    )


def proving_state(
    key: ProvingKey, synthesized: Synthesized, randomness: tuple[int, int], g1: dict[str, G1]
) -> ProvingState:
    r, s = randomness
    return ProvingState(
        key, synthesized.witness, synthesized.public, r, s, g1["a"], g1["b1"], g1["c"], g1["h"]
    )
