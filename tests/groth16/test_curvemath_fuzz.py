"""Fuzzing the C extension from its two sides: the .zkey and .wtns readers on corrupted bytes, then proving
with whatever parses (a proof or the core's own error, never a crash), and the module's argument checks
(wrong lengths, odd buffer sizes, unaligned and non-contiguous numpy views, huge and negative counts,
thread counts of 0, -1 and 2**40). Run in the normal suite with few examples and in the sanitiser lane
(ASan + UBSan, ``make sanitize``) over the same code; PROOFLANE_FUZZ_EXAMPLES sets how many (default 40)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from prooflane.groth16 import BLS12381, BN128, read_wtns, read_zkey, setup, verify, write_wtns, write_zkey
from prooflane.groth16.errors import Groth16Error
from prooflane.groth16.proving import prove
from tests.support.arithmetics import extension_module
from tests.support.groth16_samples import square_chain

EXAMPLES = int(os.environ.get("PROOFLANE_FUZZ_EXAMPLES", "40"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_FOLDER = Path(tempfile.mkdtemp(prefix="prooflane-cfuzz-"))

MAX_THREADS = 64
R = {0: BN128.r, 1: BLS12381.r}
WIDTH = {(0, 1): 64, (0, 2): 128, (1, 1): 96, (1, 2): 192}
REFUSED = (ValueError, TypeError, BufferError, OverflowError)  # what a malformed argument may raise
THREADS = st.sampled_from([-(2**70), -(2**40), -1, 0, 1, 2, 3, 7, 64, 65, 2**31, 2**40, 2**70])
INT_MAX, SSIZE_MAX = 2**31 - 1, 2**63 - 1
CURVE_IDS = st.sampled_from([0, 1] * 4 + [-1, 2])  # mostly real curves: most calls get past the first check
GROUP_IDS = st.sampled_from([1, 2] * 4 + [0, 3])


def _clamp(threads: int) -> int:
    return min(max(threads, 1), MAX_THREADS)


def _files() -> tuple[bytes, bytes]:
    r1cs, witness = square_chain(BN128, 6)
    write_zkey(_FOLDER / "k.zkey", setup(r1cs, seed=b"c-fuzz"))
    write_wtns(_FOLDER / "w.wtns", witness)
    return (_FOLDER / "k.zkey").read_bytes(), (_FOLDER / "w.wtns").read_bytes()


KEY, WITNESS = _files()


def _real_rows() -> dict[tuple[int, int], list[bytes]]:
    """Rows of points on each curve and group, from keys' sections (the bytes a .zkey holds)."""
    found: dict[tuple[int, int], list[bytes]] = {}
    for curve_id, curve in ((0, BN128), (1, BLS12381)):
        key = setup(square_chain(curve, 6)[0], seed=b"c-fuzz rows")
        for group, section in ((1, key.h_points), (2, key.b2_points)):
            found[curve_id, group] = [bytes(row) for row in section if row.any()]
    return found


REAL_ROWS = _real_rows()


# -- buffers as a caller may pass them ----------------------------------------------------------------


def _as(kind: str, data: bytes) -> Any:
    match kind:
        case "bytes":
            return data
        case "bytearray":
            return bytearray(data)
        case "memoryview":
            return memoryview(data)
        case "numpy":
            return np.frombuffer(data, dtype=np.uint8).copy()
        case "unaligned":  # C-contiguous, at an odd address
            holder = np.zeros(len(data) + 1, dtype=np.uint8)
            holder[1:] = np.frombuffer(data, dtype=np.uint8)
            return holder[1:]
        case "unaligned-u8" if len(data) % 8 == 0:  # typed, at an odd address
            holder = np.zeros(len(data) + 1, dtype=np.uint8)
            holder[1:] = np.frombuffer(data, dtype=np.uint8)
            return np.frombuffer(holder.data, dtype="<u8", offset=1)
        case "strided":  # not contiguous (where it has two bytes or more)
            holder = np.zeros(2 * len(data), dtype=np.uint8)
            holder[::2] = np.frombuffer(data, dtype=np.uint8)
            return holder[::2]
        case _:
            return data


KINDS = st.sampled_from(["bytes", "bytearray", "memoryview", "numpy", "unaligned", "unaligned-u8", "strided"])


@st.composite
def _kinds(draw: st.DrawFn, count: int) -> list[str]:
    """How to pass each of count buffers: now and then one of them not contiguous."""
    kinds = [draw(KINDS.filter(lambda kind: kind != "strided")) for _ in range(count)]
    which = draw(st.integers(0, 3 * count - 1))
    return ["strided" if i == which else kind for i, kind in enumerate(kinds)]


def _contiguous(kind: str, data: bytes) -> bool:
    return kind != "strided" or len(data) < 2


def _call(function: Callable[..., Any], *args: Any) -> Any:
    """The result, or the class of the exception it raised."""
    try:
        result = function(*args)
    except REFUSED as exc:
        event(f"refused: {type(exc).__name__}")
        return type(exc)
    event("computed")
    return result


@st.composite
def _odd(draw: st.DrawFn, data: bytes) -> bytes:
    """data, now and then one to a few bytes longer or shorter."""
    match draw(st.sampled_from(["same"] * 6 + ["longer", "shorter"])):
        case "longer":
            return data + draw(st.binary(min_size=1, max_size=7))
        case "shorter" if data:
            return data[: -draw(st.integers(1, min(7, len(data))))]
        case _:
            return data


def _mostly(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any], odds: int) -> st.SearchStrategy[Any]:
    """good, and one draw in odds + 1 bad."""
    return st.integers(0, odds).flatmap(lambda k: bad if k == 0 else good)


@st.composite
def _one_odd(draw: st.DrawFn, buffers: list[bytes]) -> list[bytes]:
    """buffers, now and then one of them a few bytes longer or shorter."""
    which = draw(st.integers(0, 2 * len(buffers) - 1))
    return [draw(_odd(b)) if i == which else b for i, b in enumerate(buffers)]


# -- msm and first_off_curve ---------------------------------------------------------------------------


@st.composite
def _rows(draw: st.DrawFn, curve: int, group: int) -> tuple[bytes, bool]:
    """Rows for (curve, group) where it exists (else for BN254 G1): points on the curve, the point at
    infinity, or random bytes; and whether every row is a real point."""
    width = WIDTH.get((curve, group), 64)
    real = REAL_ROWS.get((curve, group), REAL_ROWS[0, 1])
    rows, all_real = [], True
    for _ in range(draw(st.integers(0, 10))):
        match draw(st.sampled_from(["point", "point", "infinity", "random"])):
            case "point":
                rows.append(draw(st.sampled_from(real)))
            case "infinity":
                rows.append(bytes(width))
            case _:
                rows.append(draw(st.binary(min_size=width, max_size=width)))
                all_real = False
    return b"".join(rows), all_real


@FUZZ
@given(data=st.data())
def test_msm_refuses_what_is_malformed_and_reads_any_view_alike(data: st.DataObject) -> None:
    cm = extension_module()
    curve = data.draw(st.sampled_from([0, 1] * 4 + [-1, 2, 2**31]), "curve")
    group = data.draw(GROUP_IDS, "group")
    rows, all_real = data.draw(_rows(curve, group))
    rows = data.draw(_odd(rows), "rows")
    count = len(rows) // WIDTH.get((curve, group), 64)
    scalars = data.draw(_odd(data.draw(st.binary(min_size=32 * count, max_size=32 * count))), "scalars")
    threads, window = data.draw(THREADS, "threads"), data.draw(st.sampled_from([0, -3, 2, 11, 16, 17]))
    kinds = data.draw(_kinds(2), "kinds")
    got = _call(cm.msm, curve, group, _as(kinds[0], rows), _as(kinds[1], scalars), threads, window)
    width = WIDTH.get((curve, group))
    if curve == 2**31 or not (_contiguous(kinds[0], rows) and _contiguous(kinds[1], scalars)):
        assert got in REFUSED  # by the argument parser
    elif width is None or len(rows) % width or len(scalars) % 32 or len(rows) // width != len(scalars) // 32:
        assert got is ValueError
    else:
        assert isinstance(got, bytes) and len(got) == width
        assert got == cm.msm(curve, group, rows, scalars, _clamp(threads), window)  # threads clamped
        if all_real:  # a true sum: the same on every thread count, and split by the endomorphism (key rows)
            assert got == cm.msm(curve, group, rows, scalars, 1)
            assert got == cm.msm(curve, group, rows, scalars, _clamp(threads), window, 0, True)


@FUZZ
@given(data=st.data())
def test_the_on_curve_check_refuses_what_is_malformed_and_reads_any_view_alike(data: st.DataObject) -> None:
    cm = extension_module()
    curve, group = data.draw(CURVE_IDS, "curve"), data.draw(GROUP_IDS, "group")
    rows, all_real = data.draw(_rows(curve, group))
    rows = data.draw(_odd(rows), "rows")
    kind = data.draw(KINDS, "kind")
    got = _call(cm.first_off_curve, curve, group, _as(kind, rows))
    width = WIDTH.get((curve, group))
    if not _contiguous(kind, rows):
        assert got in REFUSED
    elif width is None or len(rows) % width:
        assert got is ValueError
    else:
        assert isinstance(got, int) and -1 <= got < len(rows) // width
        assert got == cm.first_off_curve(curve, group, rows)
        if all_real:
            assert got == -1


# -- coset_h -------------------------------------------------------------------------------------------

DOMAINS = st.sampled_from([1, 2, 4, 8, 16, 32] * 2 + [-(2**63), -1, 0, 3, 6, 2**31, 2**40, SSIZE_MAX, 2**64])


@FUZZ
@given(data=st.data())
def test_coset_h_refuses_what_is_malformed_and_reads_any_view_alike(data: st.DataObject) -> None:
    cm = extension_module()
    curve, n = data.draw(CURVE_IDS, "curve"), data.draw(DOMAINS, "n")
    m = data.draw(st.integers(0, 18), "values")
    given = [data.draw(st.binary(min_size=size, max_size=size)) for size in (32 * m, 32 * m, 32 * m, 96)]
    *vectors, roots = data.draw(_one_odd(given))
    threads, kinds = data.draw(THREADS, "threads"), data.draw(_kinds(4), "kinds")
    args = [_as(kind, v) for kind, v in zip(kinds, [*vectors, roots], strict=True)]
    got = _call(cm.coset_h, curve, args[0], args[1], args[2], n, args[3], threads)
    lengths = {len(v) for v in vectors}
    if not -(2**63) <= n <= SSIZE_MAX or not all(
        _contiguous(k, v) for k, v in zip(kinds, [*vectors, roots], strict=True)
    ):
        assert got in REFUSED  # by the argument parser
    elif (
        curve not in (0, 1)
        or not (1 <= n <= 2**30 and n & (n - 1) == 0)
        or len(lengths) != 1
        or len(vectors[0]) % 32
        or len(vectors[0]) // 32 > n
        or len(roots) != 96
    ):
        assert got is ValueError
    else:
        assert isinstance(got, bytes) and len(got) == 32 * n
        assert got == cm.coset_h(curve, *vectors, n, roots, _clamp(threads))
        assert got == cm.coset_h(curve, *vectors, n, roots, 1)  # the same butterflies on any threads


# -- synthesize and from_montgomery --------------------------------------------------------------------


def _synthesis(curve: int, terms: list[tuple[int, int, int, int]], witness: list[int], n_rows: int) -> bytes:
    """A·w, B·w and their product in plain Python."""
    r, ab = R[curve], [[0] * n_rows, [0] * n_rows]
    for matrix, row, wire, value in terms:
        ab[matrix][row] = (ab[matrix][row] + value * witness[wire]) % r
    c = [a * b % r for a, b in zip(*ab, strict=True)]
    return b"".join(v.to_bytes(32, "little") for v in [*ab[0], *ab[1], *c])


@FUZZ
@given(data=st.data())
def test_synthesis_refuses_what_is_malformed_and_equals_python_s(data: st.DataObject) -> None:
    cm = extension_module()
    curve = data.draw(CURVE_IDS, "curve")
    sizes = [0, 1, 3, 5] * 4 + [-(2**62), -1, 2**30 + 1, 2**62, SSIZE_MAX]
    n_rows = data.draw(st.sampled_from(sizes), "n_rows")
    r = R.get(curve, BN128.r)
    bad = st.sampled_from([r, 2**256 - 1])
    witness = data.draw(st.lists(_mostly(st.integers(0, r - 1), bad, 9), min_size=1, max_size=5))

    def index(size: int) -> st.SearchStrategy[int]:  # mostly in range; else just outside it, or far
        inside = st.integers(0, max(0, min(size, 6) - 1))
        return _mostly(inside, st.sampled_from([-1, size, -(2**63), 2**63 - 1]), 15)

    matrices = st.sampled_from([0, 1] * 12 + [2, 2**32 - 1])
    term = st.tuples(matrices, index(n_rows), index(len(witness)), st.integers(0, 2**256 - 1))
    terms = data.draw(st.lists(term, max_size=6))
    raw = [
        b"".join(t[0].to_bytes(4, "little") for t in terms),
        b"".join(t[1].to_bytes(8, "little", signed=True) for t in terms),
        b"".join(t[2].to_bytes(8, "little", signed=True) for t in terms),
        b"".join(t[3].to_bytes(32, "little") for t in terms),
        b"".join(w.to_bytes(32, "little") for w in witness),
    ]
    raw = data.draw(_one_odd(raw))
    kinds = data.draw(_kinds(len(raw)), "kinds")
    got = _call(cm.synthesize, curve, *(_as(k, b) for k, b in zip(kinds, raw, strict=True)), n_rows)
    n_wires = len(raw[4]) // 32
    if not all(_contiguous(k, b) for k, b in zip(kinds, raw, strict=True)):
        assert got in REFUSED
    elif (
        curve not in (0, 1)
        or [len(raw[0]), len(raw[1]), len(raw[2]), len(raw[3])]
        != [4 * len(terms), *[8 * len(terms)] * 2, 32 * len(terms)]
        or len(raw[4]) % 32
        or not 0 <= n_rows <= 2**30
        or any(w >= r for w in witness)
        or any(m > 1 or not 0 <= row < n_rows or not 0 <= wire < n_wires for m, row, wire, _ in terms)
    ):
        assert got is ValueError
    else:
        assert got == _synthesis(curve, terms, witness, n_rows)


@FUZZ
@given(
    curve=CURVE_IDS,
    values=st.lists(st.integers(0, 2**256 - 1), max_size=6),
    times=st.sampled_from([0, 1, 2, 4] * 2 + [-1, 5, 2**31, 2**40]),
    kind=KINDS,
    extra=st.just(b"") | st.just(b"") | st.binary(min_size=1, max_size=3),
)
def test_from_montgomery_refuses_what_is_malformed_and_equals_python_s(
    curve: int, values: list[int], times: int, kind: str, extra: bytes
) -> None:
    raw = b"".join(v.to_bytes(32, "little") for v in values) + extra
    got = _call(extension_module().from_montgomery, curve, _as(kind, raw), times)
    if times > INT_MAX or not _contiguous(kind, raw):
        assert got in REFUSED  # by the argument parser (OverflowError; the buffer's own error)
    elif curve not in (0, 1) or extra or not 0 <= times <= 4:
        assert got is ValueError
    else:
        r = R[curve]
        r_inv = pow(2**256, -times, r)
        want = [v if times == 0 else v * r_inv % r for v in values]
        assert got == b"".join(v.to_bytes(32, "little") for v in want)


def test_thread_counts_that_are_not_ints_are_refused() -> None:
    cm = extension_module()
    for threads in (1.5, "2", None):
        with pytest.raises(TypeError):
            cm.msm(0, 1, b"", b"", threads)
        with pytest.raises(TypeError):
            cm.coset_h(0, b"", b"", b"", 1, bytes(96), threads)


# -- the readers, then proving with what parses ---------------------------------------------------------


@st.composite
def _mutated(draw: st.DrawFn, original: bytes) -> bytes:
    data = bytearray(original)
    match draw(st.sampled_from(["keep", "flip", "flip", "truncate", "splice", "u32"])):
        case "keep":
            pass
        case "flip":
            for _ in range(draw(st.integers(1, 8))):
                data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
        case "truncate":
            del data[draw(st.integers(0, len(data) - 1)) :]
        case "splice":
            at = draw(st.integers(0, len(data)))
            data[at:at] = draw(st.binary(max_size=64))
        case _:  # a count or size replaced: what makes a reader allocate or index
            at = draw(st.integers(0, len(data) - 4))
            value = draw(st.sampled_from([0, 1, 2**16, 2**31 - 1, 2**31, 2**32 - 1]))
            data[at : at + 4] = value.to_bytes(4, "little")
    return bytes(data)


@FUZZ
@given(key=_mutated(KEY), witness=_mutated(WITNESS), threads=THREADS)
def test_corrupt_keys_and_witnesses_are_refused_or_prove(key: bytes, witness: bytes, threads: int) -> None:
    (_FOLDER / "fuzzed.zkey").write_bytes(key)
    (_FOLDER / "fuzzed.wtns").write_bytes(witness)
    try:
        parsed = read_zkey(_FOLDER / "fuzzed.zkey"), read_wtns(_FOLDER / "fuzzed.wtns")
    except Groth16Error as exc:
        event(f"refused by a reader: {type(exc).__name__}")
        return
    try:
        proof = prove(*parsed, threads=_clamp(threads))
    except Groth16Error as exc:
        event(f"refused by the prover: {type(exc).__name__}")
        return
    valid = verify(parsed[0].verification_key, proof.public, proof)
    event(f"proved ({'valid' if valid else 'invalid'})")
    if key == KEY and witness == WITNESS:
        assert valid


def test_synthesis_takes_coefficients_of_any_32_bytes_modulo_r() -> None:
    # a coefficient of 2r or more once broke the Montgomery product's bound on BLS12-381 (one spare bit)
    cm = extension_module()
    for curve in (0, 1):
        r = R.get(curve, BN128.r)
        terms = [(0, 0, 0, 2**256 - 1), (1, 0, 0, 2 * r + 5), (0, 1, 0, r)]
        witness = [1]
        raw = [
            b"".join(t[0].to_bytes(4, "little") for t in terms),
            b"".join(t[1].to_bytes(8, "little") for t in terms),
            b"".join(t[2].to_bytes(8, "little") for t in terms),
            b"".join(t[3].to_bytes(32, "little") for t in terms),
            (1).to_bytes(32, "little"),
        ]
        assert cm.synthesize(curve, *raw, 2) == _synthesis(curve, terms, witness, 2)
