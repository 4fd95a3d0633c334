"""The C extension (``_curvemath``) against the libraries and plain Python: MSMs on every curve and group
(both bucket strategies, equal and opposite points, infinity, zero and extreme scalars, any thread count),
the quotient's NTT, synthesis, the on-curve check and its refusals of malformed input."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from prooflane.groth16 import BLS12381, BN128, Curve, read_zkey, setup, synthesize, write_zkey
from prooflane.groth16.adapters import library
from prooflane.groth16.arithmetic import choose
from prooflane.groth16.field import FieldVector, from_ints, to_ints
from prooflane.groth16.points import TWIST_B, mont_row
from tests.support import curve_reference as ref
from tests.support.arithmetics import c_extension, extension_module, libraries
from tests.support.groth16_samples import square_chain
from tests.support.msm import CURVE_IDS as _CURVE_IDS
from tests.support.msm import coords as _coords
from tests.support.msm import generator as _generator
from tests.support.msm import library_msm as _library_msm
from tests.support.msm import rows_of as _rows

CURVES = [pytest.param(BN128, id="bn128"), pytest.param(BLS12381, id="bls12381")]
GROUPS = [pytest.param(1, id="G1"), pytest.param(2, id="G2")]


def _cm() -> Any:
    return extension_module()


def _native_msm(curve: Curve, group: int, rows: NDArray[np.uint8], scalars: list[int], threads: int) -> Any:
    return c_extension(curve).msm_rows(
        rows, from_ints(scalars) if scalars else np.zeros((0, 4), "<u8"), group, threads
    )


@pytest.mark.parametrize("curve", CURVES)
@pytest.mark.parametrize("group", GROUPS)
def test_small_msms_equal_the_library_s(curve: Curve, group: int) -> None:
    rng, be = random.Random(11 + group), library(curve)
    gen, _ = _generator(curve, group)
    for n in (0, 1, 2, 7, 40):
        points: list[Any] = [be.mul(gen, rng.randrange(1, curve.r)) for _ in range(n)]
        scalars = [rng.choice([0, 1, 2, curve.r - 1, 2**256 - 1, rng.randrange(curve.r)]) for _ in range(n)]
        if n >= 7:
            points[3], scalars[3] = points[1], scalars[1]  # an equal term: the doubling case
            points[4] = be.mul(points[2], curve.r - 1)  # an opposite point
            scalars[4] = scalars[2]  # ... whose term cancels
            points[5] = None  # the point at infinity (a row of zeros)
        want = _library_msm(curve, group, points, [k % curve.r for k in scalars])
        for threads in (1, 2, 3):
            assert _native_msm(curve, group, _rows(curve, group, points), scalars, threads) == want


@pytest.mark.parametrize("curve", CURVES)
@pytest.mark.parametrize("group", GROUPS)
def test_batched_buckets_handle_repeats_doublings_and_cancellations(curve: Curve, group: int) -> None:
    """Enough terms for the batch-affine buckets, drawn from few points (every bucket meets equal and
    opposite points) with few distinct scalars."""
    rng, be = random.Random(5 + group), library(curve)
    gen, _ = _generator(curve, group)
    few = [be.mul(gen, rng.randrange(1, curve.r)) for _ in range(6)]
    few += [be.mul(p, curve.r - 1) for p in few[:3]]  # their negations
    n = 20_000 if group == 1 else 9_000
    points = [few[rng.randrange(len(few))] for _ in range(n)]
    choices = [1, 2, 3, curve.r - 1, rng.randrange(curve.r), rng.randrange(curve.r)]
    scalars = [rng.choice(choices) for _ in range(n)]
    # The expected value from the grouped sum: sum over distinct points of (sum of their scalars)·P.
    weight: dict[int, int] = {}
    for i, point in enumerate(points):
        key = few.index(point) if point in few else -1
        weight[key] = (weight.get(key, 0) + scalars[i]) % curve.r
    want = _library_msm(curve, group, [few[k] for k in weight], list(weight.values()))
    rows = _rows(curve, group, points)
    assert _native_msm(curve, group, rows, scalars, 2) == want
    for window in (11, 12):  # 2^10 and 2^11 affine buckets: the batched path whatever the default
        raw = _cm().msm(_CURVE_IDS[curve.name], group, rows, from_ints(scalars), 2, window)
        assert _coords(curve, raw) == want


def test_terms_crowding_into_one_bucket_are_summed() -> None:
    """0/1 values (a circuit's bits) put every term of window 0 into one bucket: the batch's overflow."""
    rng, be = random.Random(9), library(BN128)
    gen, _ = _generator(BN128, 1)
    points = [be.mul(gen, rng.randrange(1, BN128.r)) for _ in range(6000)]  # batched: 4 terms a bucket
    scalars = [rng.choice([1, 1, 1, rng.randrange(BN128.r)]) for _ in points]
    want = _library_msm(BN128, 1, points, scalars)
    raw = _cm().msm(0, 1, _rows(BN128, 1, points), from_ints(scalars), 2, 11)
    assert tuple(int.from_bytes(raw[i : i + 32], "little") for i in range(0, 64, 32)) == want


@pytest.mark.parametrize("curve", CURVES)
@pytest.mark.parametrize("group", GROUPS)
def test_fixed_base_tables_hold_the_multiples_and_their_msm_equals_the_plain_one(
    curve: Curve, group: int
) -> None:
    """The tables' rows are the points times 2^(shift·t) (infinity stays zero), and an MSM over them, with
    every shape the prover may choose (one window a table or several), is the plain MSM of the rows."""
    rng, be = random.Random(21 + group), library(curve)
    gen, _ = _generator(curve, group)
    n = 600 if group == 1 else 300  # past a chunk of the table's batch inversion (256 rows)
    points: list[Any] = [be.mul(gen, rng.randrange(1, curve.r)) for _ in range(n)]
    points[7] = None
    points[8] = points[9]  # equal points: equal multiples, a bucket's doubling
    rows, cid = _rows(curve, group, points), _CURVE_IDS[curve.name]
    table = np.frombuffer(_cm().fixed_table(cid, group, rows, 5, 3, 2), np.uint8).reshape(n * 3, -1)
    for k in (0, 7, 8, n - 1):
        for t in range(3):
            want = None if points[k] is None else be.mul(points[k], 2 ** (5 * t))
            assert (table[k * 3 + t] == _rows(curve, group, [want])[0]).all()
    scalars = [rng.choice([0, 1, 2, curve.r - 1, rng.randrange(curve.r)]) for _ in range(n)]
    want = _native_msm(curve, group, rows, scalars, 2)
    for window, stride in ((13, 2), (13, 1), (9, 3), (4, 64)):
        windows = -(-(curve.r.bit_length() + 2) // window)
        tables = -(-windows // stride)
        data = _cm().fixed_table(cid, group, rows, window * stride, tables, 3)
        for threads in (1, 2):
            raw = _cm().msm(cid, group, data, from_ints(scalars), threads, window, stride)
            assert _coords(curve, raw) == want, (window, stride, threads)


def test_tables_too_few_for_the_scalars_are_refused() -> None:
    """Tables that cover fewer windows than a scalar has are an error, not a wrong sum."""
    rows = _rows(BN128, 1, [library(BN128).g1(library(BN128).g1_gen)] * 3)
    data = _cm().fixed_table(0, 1, rows, 13, 2, 1)  # 26 bits of windows
    small = from_ints([5, 6, 2**20])
    want = _native_msm(BN128, 1, rows, to_ints(small), 1)
    assert _coords(BN128, _cm().msm(0, 1, data, small, 1, 13, 1)) == want
    with pytest.raises(ValueError, match="more than the tables' 2 windows of 13 bits"):
        _cm().msm(0, 1, data, from_ints([5, 6, BN128.r - 1]), 1, 13, 1)
    with pytest.raises(ValueError, match=r"window of 2\.\.16 bits"):
        _cm().msm(0, 1, data, small, 1, 17, 1)
    with pytest.raises(ValueError, match="bytes of rows"):
        _cm().msm(0, 1, data, from_ints([1, 2, 3, 4]), 1, 13, 1)  # 6 rows: not tables of 4 points
    with pytest.raises(ValueError, match="shift 0 and tables 3"):
        _cm().fixed_table(0, 1, rows, 0, 3, 1)


@pytest.mark.parametrize("curve", CURVES)
def test_an_msm_of_a_key_section_equals_the_library_s(curve: Curve) -> None:
    key = setup(square_chain(curve, 300)[0], seed=b"native msm")
    w = from_ints([random.Random(3).randrange(curve.r) for _ in range(key.n_vars)])
    be = library(curve)
    for name, group in (("a", 1), ("b1", 1), ("b2", 2)):
        rows = getattr(key, f"{name}_points")
        built = iter(be.points(rows[rows.any(axis=1)], group))
        points = [next(built) if row.any() else None for row in rows]
        assert _native_msm(curve, group, rows, to_ints(w), 2) == _library_msm(
            curve, group, points, to_ints(w)
        )


def test_the_msm_is_the_group_law_outside_g2() -> None:
    """Twist points outside G2 (the subgroup test by combinations relies on it)."""
    rng, q, b = random.Random(17), BN128.q, TWIST_B["bn128"]
    plain = [ref.random_point(rng, q, b, extension=True) for _ in range(5)]
    scalars = [rng.randrange(BN128.r) for _ in plain]
    expected = None
    for point, k in zip(plain, scalars, strict=True):
        expected = ref.add(expected, ref.mul(point, k, q), q)
    rows = np.stack([mont_row(BN128, ref.flat(p, extension=True)) for p in plain])
    got = _native_msm(BN128, 2, rows, scalars, 2)
    assert got == ref.flat(expected, extension=True)  # type: ignore[arg-type]
    r_times = _native_msm(BN128, 2, rows[:1], [BN128.r], 1)
    assert r_times != (0, 0, 0, 0) and ref.mul(plain[0], BN128.r, q) is not None


# csrc/glv.h's λ: the cube root of unity mod r that φ(x, y) = (βx, y) multiplies by on the subgroup.
GLV_LAMBDA = {
    "bn128": 0x30644E72E131A029048B6E193FD84104CC37A73FEC2BC5E9B8CA0B2D36636F23,
    "bls12381": 0xAC45A4010001A40200000000FFFFFFFF,
}


@pytest.mark.parametrize("curve", CURVES)
@pytest.mark.parametrize("group", GROUPS)
def test_the_endomorphism_split_is_the_same_sum_on_subgroup_points(curve: Curve, group: int) -> None:
    """``endo``: every scalar split in two halves over P and φ(P); the sum of the library and of the plain
    MSM for scalars at the split's edges (multiples of λ and r, past r, 2^256 - 1), any thread count, and
    both bucket strategies."""
    lam, r = GLV_LAMBDA[curve.name], curve.r
    assert lam != 1 and pow(lam, 3, r) == 1
    rng, be = random.Random(31 + group), library(curve)
    gen, _ = _generator(curve, group)
    cid = _CURVE_IDS[curve.name]
    edges = [0, 1, 2, lam, lam - 1, lam + 1, r - lam, 2 * lam, lam * lam % r, r - 1, r, r + 1, 2**128,
             2**128 - 1, 2**255, 2**256 - 1, (r - 1) // 2]  # fmt: skip
    for n in (1, 2, 40):
        points: list[Any] = [be.mul(gen, rng.randrange(1, r)) for _ in range(n)]
        scalars = [edges[i % len(edges)] if i < len(edges) else rng.randrange(2**256) for i in range(n)]
        rows, want = _rows(curve, group, points), _library_msm(curve, group, points, [k % r for k in scalars])
        for threads in (1, 2, 3):
            raw = _cm().msm(cid, group, rows, from_ints(scalars), threads, 0, 0, True)
            assert _coords(curve, raw) == want, (n, threads)
    n = 2300  # batched buckets at c = 11 (over 4 split terms a bucket), Jacobian ones at 10 and 13
    base = [be.mul(gen, rng.randrange(1, r)) for _ in range(50)]
    points = [base[i % 50] for i in range(n)]  # equal points: doublings and cancellations in the buckets
    scalars = [rng.choice([*edges, rng.randrange(r), rng.randrange(2**256)]) for _ in range(n)]
    rows = _rows(curve, group, points)
    want = _native_msm(curve, group, rows, scalars, 2)
    for window in (0, 10, 11, 13):
        raw = _cm().msm(cid, group, rows, from_ints(scalars), 2, window, 0, True)
        assert _coords(curve, raw) == want, window
    short = [rng.choice([0, 1, 1, 2, 2**127 + 5, 2**128 - 1]) for _ in range(n)]  # nothing to split
    raw = _cm().msm(cid, group, rows, from_ints(short), 2, 0, 0, True)
    assert _coords(curve, raw) == _native_msm(curve, group, rows, short, 2)


def test_the_endomorphism_split_is_not_the_group_law_off_the_subgroup() -> None:
    """Off G2, φ is not multiplication by λ: the split computes another sum. That is why only a checked
    key's sections are split, and the subgroup checks (which must see the group law) never are; and
    tables are refused."""
    rng, q, b = random.Random(19), BN128.q, TWIST_B["bn128"]
    plain = [ref.random_point(rng, q, b, extension=True) for _ in range(3)]
    scalars = [rng.randrange(2**200, BN128.r) for _ in plain]
    rows = np.stack([mont_row(BN128, ref.flat(p, extension=True)) for p in plain])
    law = _cm().msm(0, 2, rows, from_ints(scalars), 1)
    assert _cm().msm(0, 2, rows, from_ints(scalars), 1, 0, 0, True) != law
    assert _coords(BN128, law) == _native_msm(BN128, 2, rows, scalars, 1)  # msm_rows: the group law
    data = _cm().fixed_table(0, 2, rows, 26, 10, 1)
    with pytest.raises(ValueError, match="for rows, not for tables"):
        _cm().msm(0, 2, data, from_ints(scalars), 1, 13, 2, True)


@pytest.mark.parametrize("curve", CURVES)
def test_the_coset_values_equal_the_library_fft_s(curve: Curve) -> None:
    rng, ext, lib, r = random.Random(8), c_extension(curve), libraries(curve), curve.r
    for n, m in ((1, 1), (2, 2), (4, 3), (16, 9), (1024, 1000)):
        a, b = ([rng.randrange(r) for _ in range(m)] for _ in range(2))
        c = [x * y % r for x, y in zip(a, b, strict=True)]
        vectors = [from_ints(v) for v in (a, b, c)]
        want = to_ints(
            lib.coset_h(vectors[0], vectors[1], vectors[2], n, 1)
        )  # the library's FFT, in Python ints
        for threads in (1, 2, 4):
            assert to_ints(ext.coset_h(vectors[0], vectors[1], vectors[2], n, threads)) == want


@pytest.mark.parametrize("curve", CURVES)
def test_the_coset_values_take_any_32_bytes_modulo_r(curve: Curve) -> None:
    # values of r and beyond (up to 2^256 - 1, over 2r on both curves) mean their residues, in a, b and c
    rng, ext, lib, r = random.Random(9), c_extension(curve), libraries(curve), curve.r
    n = 64
    residues = [[rng.randrange(r) for _ in range(n)] for _ in range(3)]
    given = [[x + r * rng.randrange((2**256 - 1 - x) // r + 1) for x in v] for v in residues]
    given[0][0] = given[1][1] = given[2][2] = 2**256 - 1
    residues[0][0] = residues[1][1] = residues[2][2] = (2**256 - 1) % r
    assert all(x >= 2 * r for x in (given[0][0], given[1][1], given[2][2]))
    as_rows = [np.array([[x >> (64 * j) & (2**64 - 1) for j in range(4)] for x in v], "<u8") for v in given]
    a, b, c = (from_ints(v) for v in residues)
    want = to_ints(lib.coset_h(a, b, c, n, 1))
    for threads in (1, 2, 4):
        assert to_ints(ext.coset_h(as_rows[0], as_rows[1], as_rows[2], n, threads)) == want


@pytest.mark.parametrize("curve", CURVES)
def test_synthesis_equals_the_python_one(curve: Curve, monkeypatch: pytest.MonkeyPatch) -> None:
    r1cs, witness = square_chain(curve, 40)
    key = setup(r1cs, seed=b"native synthesis")
    monkeypatch.setitem(choose._CHOSEN, curve.name, c_extension(curve))
    native = synthesize(key, witness)
    monkeypatch.setitem(choose._CHOSEN, curve.name, libraries(curve))
    plain = synthesize(key, witness)
    for name in ("a", "b", "c"):
        assert np.array_equal(getattr(native, name), getattr(plain, name))


@pytest.mark.parametrize("curve", CURVES)
@pytest.mark.parametrize("group", GROUPS)
def test_the_on_curve_check_finds_the_first_bad_row(curve: Curve, group: int) -> None:
    be, rng, cm = library(curve), random.Random(21), _cm()
    gen, _ = _generator(curve, group)
    rows = _rows(curve, group, [be.mul(gen, rng.randrange(1, curve.r)) for _ in range(6)] + [None])
    assert cm.first_off_curve(_CURVE_IDS[curve.name], group, rows) == -1  # infinity's zeros pass
    bad = rows.copy()
    bad[4, 0] ^= 1  # x changed: off the curve
    bad[5] = 0xFF  # coordinates above q
    assert cm.first_off_curve(_CURVE_IDS[curve.name], group, bad) == 4
    assert cm.first_off_curve(_CURVE_IDS[curve.name], group, bad[5:]) == 0


def test_malformed_input_is_refused_with_a_reason() -> None:
    cm, rows = _cm(), np.zeros((3, 64), np.uint8)
    with pytest.raises(ValueError, match="no such curve"):
        cm.msm(7, 1, rows, np.zeros((3, 4), "<u8"), 1)
    with pytest.raises(ValueError, match="bytes of rows"):
        cm.msm(_CURVE_IDS["bn128"], 1, rows, np.zeros((2, 4), "<u8"), 1)
    with pytest.raises(ValueError, match="not rows of"):
        cm.first_off_curve(0, 2, rows)
    with pytest.raises(ValueError, match="power of two"):
        cm.coset_h(0, b"", b"", b"", 3, bytes(96), 1)
    with pytest.raises(ValueError, match="at most the domain"):
        cm.coset_h(0, bytes(96), bytes(96), bytes(96), 2, bytes(96), 1)
    one = np.array([[1, 0, 0, 0]], "<u8")
    with pytest.raises(ValueError, match="out of range"):
        cm.synthesize(0, np.array([0], "<u4"), np.array([0], "<i8"), np.array([5], "<i8"), one, one, 1)
    with pytest.raises(ValueError, match="not below the field"):
        big = np.array([[2**64 - 1] * 4], "<u8")
        cm.synthesize(0, np.array([0], "<u4"), np.array([0], "<i8"), np.array([0], "<i8"), one, big, 1)


def test_field_vectors_are_what_the_extension_reads() -> None:
    vec: FieldVector = from_ints([1, 2**255, BN128.r - 1])
    assert vec.dtype == np.dtype("<u8") and vec.flags["C_CONTIGUOUS"] and vec.shape == (3, 4)


@pytest.mark.parametrize("curve", CURVES)
def test_a_key_s_coefficients_read_natively_equal_the_python_reading(
    curve: Curve, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "k.zkey"
    write_zkey(path, setup(square_chain(curve, 30)[0], seed=b"coefficients"))
    monkeypatch.setitem(choose._CHOSEN, curve.name, c_extension(curve))
    native = read_zkey(path).coefficients.value
    monkeypatch.setitem(choose._CHOSEN, curve.name, libraries(curve))
    assert np.array_equal(native, read_zkey(path).coefficients.value)
    assert _cm().from_montgomery(_CURVE_IDS[curve.name], (2**256 - 1).to_bytes(32, "little"), 0) == bytes(
        [255] * 32
    )


def test_more_threads_than_the_extension_runs_are_capped() -> None:
    """The extension runs at most 64 threads a call, however many it is asked for."""
    rng, be, ext = random.Random(4), library(BN128), c_extension(BN128)
    gen, _ = _generator(BN128, 1)
    points = [be.mul(gen, rng.randrange(1, BN128.r)) for _ in range(300)]
    scalars = [rng.randrange(BN128.r) for _ in points]
    rows = _rows(BN128, 1, points)
    assert _native_msm(BN128, 1, rows, scalars, 256) == _native_msm(BN128, 1, rows, scalars, 1)
    values = from_ints([rng.randrange(BN128.r) for _ in range(1024)])
    assert np.array_equal(
        ext.coset_h(values, values, values, 1024, 256), ext.coset_h(values, values, values, 1024, 1)
    )
    assert _native_msm(BN128, 1, rows, scalars, 2**40) == _native_msm(BN128, 1, rows, scalars, 1)


REFUSED_THREADS = """
import random, resource, threading
import numpy as np
from prooflane.groth16 import BN128
from prooflane.groth16.adapters import library
from prooflane.groth16.arithmetic import arithmetic
from prooflane.groth16.field import from_ints
from prooflane.groth16.points import mont_row

rng, be, ext, r = random.Random(4), library(BN128), arithmetic(BN128), BN128.r
assert ext.name == "c-extension"

vectors = [from_ints([rng.randrange(r) for _ in range(1024)]) for _ in range(3)]
gen = be.g1(be.g1_gen)
rows = np.stack([mont_row(BN128, be.g1_xy(be.mul(gen, rng.randrange(1, r)))) for _ in range(300)])
scalars = from_ints([rng.randrange(r) for _ in range(300)])
want = ext.coset_h(*vectors, 1024, 1), ext.msm_rows(rows, scalars, 1, 1)
# room for these calls' buffers, none for a thread's stack (8 MiB)
with open("/proc/self/status") as status:
    mapped = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize"))
resource.setrlimit(resource.RLIMIT_AS, (mapped + (4 << 20), resource.getrlimit(resource.RLIMIT_AS)[1]))
try:
    threading.Thread(target=lambda: None).start()
    print("a thread started")
except RuntimeError:
    print("threads refused")
got = ext.coset_h(*vectors, 1024, 4), ext.msm_rows(rows, scalars, 1, 4)
print("same" if bool((got[0] == want[0]).all()) and got[1] == want[1] else "different")
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmSize from /proc")
def test_threads_the_system_refuses_leave_the_work_to_those_that_started() -> None:
    """With no memory left for a thread's stack, pthread_create fails: the NTT (whose stages wait at a
    barrier for every thread) and the MSM finish on the threads that did start, with the same results."""
    extension_module()
    done = subprocess.run(
        [sys.executable, "-c", REFUSED_THREADS], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["threads", "refused", "same"]
