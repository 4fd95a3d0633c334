"""The C extension's kernel set (``csrc/cpu.h``): every fast kernel against its scalar twin, on every curve
and group it serves and over the edges of its code. A pair the CPU or the build lacks is skipped, saying
so (``-ra`` prints why); under ``PROOFLANE_EXPECT_IFMA=1`` a missing IFMA kernel fails. Also: the
capability word is the CPU's, ``PROOFLANE_NO_IFMA`` clears it once, and what runs is reported live."""

from __future__ import annotations

import functools
import json
import os
import platform
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from prooflane.groth16 import BLS12381, BN128, Curve, setup
from prooflane.groth16.adapters import library
from prooflane.groth16.arithmetic import NO_IFMA_ENV
from prooflane.groth16.field import from_ints, to_ints
from prooflane.groth16.points import CURVE_B, TWIST_B, mont_row
from tests.support import curve_reference as ref
from tests.support.arithmetics import c_extension, extension_module
from tests.support.groth16_samples import square_chain
from tests.support.kernels import Pair, require
from tests.support.msm import CURVE_IDS, coords, generator, library_msm, rows_of

CURVES = [pytest.param(BN128, id="bn128"), pytest.param(BLS12381, id="bls12381")]
GROUPS = [pytest.param(1, id="G1"), pytest.param(2, id="G2")]

# Every kernel the extension declares, and the test of this file that runs it against its twin.
PAIR_TESTS = {
    "mulx-products": "test_the_mulx_products_equal_the_portable_ones",
    "ifma-batches": "test_the_batches_in_ifma_lanes_equal_the_4_limb_ones",
    "ifma-bucket-sums": "test_the_bucket_sums_in_ifma_lanes_meet_doublings_and_cancellations",
    "ifma-ntt": "test_the_coset_values_in_ifma_lanes_equal_the_4_limb_ones",
    "ifma-subgroup": "test_the_subgroup_tests_in_ifma_lanes_equal_the_one_point_ones",
}


def test_every_kernel_is_declared_beside_its_twin_and_has_a_pair_test() -> None:
    kernels = extension_module().kernels()
    assert {k["name"] for k in kernels} == set(PAIR_TESTS)
    for kernel in kernels:
        assert kernel["twin"] and kernel["needs"] and kernel["curves"], kernel
        assert kernel["serves"] in {"products", "msm", "ntt", "subgroup"}, kernel
        assert PAIR_TESTS[kernel["name"]] in globals()


def _cpu_flags() -> set[str]:
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.exists():
        return set()
    return {
        flag for line in cpuinfo.read_text().splitlines() if line.startswith("flags") for flag in line.split()
    }


def test_the_capabilities_are_read_from_the_cpu() -> None:
    """The word cpuid gives agrees with the kernel's view of the CPU (/proc/cpuinfo: flags that Linux clears
    where the OS does not save the AVX-512 state); used is detected and built, less IFMA under
    PROOFLANE_NO_IFMA."""
    cm = extension_module()
    capabilities = cm.capabilities()
    if platform.machine() != "x86_64" or not sys.platform.startswith("linux"):
        assert capabilities["detected"] == ()
    else:
        flags = _cpu_flags()
        want = ["mulx"] if {"bmi2", "adx"} <= flags else []
        want += ["avx512-ifma"] if {"avx512f", "avx512ifma"} <= flags else []
        assert list(capabilities["detected"]) == want
    assert set(capabilities["built"]) == ({"mulx", "avx512-ifma"} if cm.asm else set())
    used = set(capabilities["detected"]) & set(capabilities["built"])
    if os.environ.get(NO_IFMA_ENV, "") not in ("", "0"):
        used.discard("avx512-ifma")
    assert set(capabilities["used"]) == used


_REPORT = """
import functools
import json
from prooflane.groth16 import products
from prooflane.groth16.arithmetic import load_extension
cm, _ = load_extension()
print(json.dumps({"used": cm.capabilities()["used"], "runs": [k["name"] for k in cm.kernels() if k["runs"]],
                  "products": products()}))
"""


@pytest.mark.parametrize("value", ["1", "0", ""])
def test_no_ifma_in_the_environment_clears_the_capability_once_at_load(value: str) -> None:
    cm = extension_module()
    env = {k: v for k, v in os.environ.items() if k != NO_IFMA_ENV} | {NO_IFMA_ENV: value}
    done = subprocess.run(
        [sys.executable, "-c", _REPORT], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    said = json.loads(done.stdout)
    detected = set(cm.capabilities()["detected"]) & set(cm.capabilities()["built"])
    want = detected - {"avx512-ifma"} if value == "1" else detected
    assert set(said["used"]) == want
    assert {k["name"] for k in cm.kernels() if set(k["needs"]) <= want} == set(said["runs"])
    if value == "1" or "avx512-ifma" not in detected:
        assert said["products"]["bn128"] != "avx512-ifma"
    else:
        assert said["products"]["bn128"] == "avx512-ifma"


def test_what_runs_is_reported_live() -> None:
    """``products`` and ``kernels`` read the kernels that run at the time of asking, not at import."""
    cm, ext = extension_module(), c_extension(BN128)
    require(cm, "ifma-batches", 0)
    used = cm.capabilities()["used"]
    try:
        assert ext.products() == "avx512-ifma" and "ifma-batches" in ext.kernels()
        assert cm.use_capabilities([c for c in used if c != "avx512-ifma"]) == ("mulx",)
        assert ext.products() == "mulx" and ext.kernels() == ["mulx-products"]
        assert cm.use_capabilities([]) == ()
        assert ext.products() == "portable" and ext.kernels() == []
    finally:
        assert cm.use_capabilities(used) == used


def test_unknown_capabilities_and_kernels_are_refused() -> None:
    cm = extension_module()
    with pytest.raises(ValueError, match="no such capability: avx1024"):
        cm.use_capabilities(["mulx", "avx1024"])
    with pytest.raises(ValueError, match="no such kernel: fft"):
        cm.switch_kernel("fft", True)
    with pytest.raises(TypeError):
        cm.use_capabilities(5)


# -- the pairs ----------------------------------------------------------------------------------------------


def _edge_scalars(curve: Curve, rng: random.Random, n: int) -> list[int]:
    edges = [0, 1, 2, curve.r - 1, curve.r, curve.r + 1, 2**128, 2**255, 2**256 - 1]
    return [edges[i] if i < len(edges) else rng.randrange(2**256) for i in range(n)]


def _msm_edges(curve: Curve, group: int, rng: random.Random) -> list[tuple[Any, Any, int, int, bool]]:
    """MSM calls (rows, scalars, threads, window, endo) at the edges: few terms with equal, opposite and
    infinite points and extreme scalars; batched buckets over repeated points; distinct points split."""
    be = library(curve)
    gen, _ = generator(curve, group)
    points: list[Any] = [be.mul(gen, rng.randrange(1, curve.r)) for _ in range(40)]
    points[3], points[4], points[5] = points[1], be.mul(points[2], curve.r - 1), None
    few = rows_of(curve, group, points)
    many = rows_of(curve, group, [points[rng.randrange(6, 40)] for _ in range(2500)])
    calls = []
    for threads in (1, 3):
        calls.append((few, from_ints(_edge_scalars(curve, rng, 40)), threads, 0, False))
        calls.append((few, from_ints(_edge_scalars(curve, rng, 40)), threads, 0, True))
    for window in (0, 11, 12):
        calls.append((many, from_ints(_edge_scalars(curve, rng, 2500)), 2, window, window == 12))
    return calls


@pytest.mark.parametrize("curve", CURVES)
@pytest.mark.parametrize("group", GROUPS)
def test_the_mulx_products_equal_the_portable_ones(curve: Curve, group: int) -> None:
    """mont_x86.h's mulx/adcx/adox products (and 6-limb difference) against the portable C: MSMs at the
    edges, fixed-base tables, the on-curve check, and (once a curve, with G1) the NTT, synthesis, scalars
    out of Montgomery form and BLS12-381's subgroup tests; and the MSMs against the library."""
    cm, cid, rng = extension_module(), CURVE_IDS[curve.name], random.Random(51 + group)
    pair = Pair(cm, "mulx-products", cid)
    calls = _msm_edges(curve, group, rng)
    ext, (key, witness) = c_extension(curve), _key(curve)
    values = [from_ints([rng.randrange(curve.r) for _ in range(1000)]) for _ in range(3)]
    montgomery = from_ints(_edge_scalars(curve, rng, 64))

    def run() -> list[Any]:
        out: list[Any] = [cm.msm(cid, group, r, s, t, w, 0, e) for r, s, t, w, e in calls]
        table = cm.fixed_table(cid, group, calls[0][0], 26, 10, 2)
        out += [
            table,
            cm.msm(cid, group, table, calls[0][1], 2, 13, 2),
            cm.first_off_curve(cid, group, table),
        ]
        if curve == BLS12381:
            out.append(cm.first_outside_subgroup(cid, group, calls[-1][0], 2))
        if group == 1:
            for threads in (1, 4):
                out.append(ext.coset_h(values[0], values[1], values[2], 1024, threads).tobytes())
            coef = key.coefficients
            rows = int(coef.row.max()) + 1
            out.append(cm.from_montgomery(cid, montgomery, 2))
            out.append(
                ext.synthesize(coef.matrix, coef.row, coef.wire, coef.value, witness, rows)[2].tobytes()
            )
        return out

    fast = pair.fast(run)
    assert pair.twin(run) == fast
    sums = fast[: len(calls)]
    small = calls[0]
    be = library(curve)
    gen, _ = generator(curve, group)
    assert coords(curve, sums[0]) == library_msm(
        curve, group, _points_of(curve, group, small[0], be, gen), to_ints(small[1])
    )


@functools.cache
def _key(curve: Curve) -> tuple[Any, Any]:
    r1cs, witness = square_chain(curve, 40)
    return setup(r1cs, seed=b"kernel pairs"), witness


def _points_of(curve: Curve, group: int, rows: Any, be: Any, gen: Any) -> list[Any]:
    """The library's points of rows (zeros: None)."""
    built = iter(be.points(rows[rows.any(axis=1)], group))
    return [next(built) if row.any() else None for row in rows]


@pytest.mark.parametrize("curve", CURVES)
@pytest.mark.parametrize("group", GROUPS)
def test_the_batches_in_ifma_lanes_equal_the_4_limb_ones(curve: Curve, group: int) -> None:
    """csrc/ifma.h: batched additions eight at a time in AVX-512 IFMA lanes against the same MSMs with the
    4-limb products: batches of every size (the last of a unit partial, padded lanes), repeated and opposite
    points (doublings and cancellations kept out of the batch), bits crowding into one bucket, split and
    not; and 1,500 terms against the library's MSM, plain and split."""
    cm, cid = extension_module(), CURVE_IDS[curve.name]
    pair = Pair(cm, "ifma-batches", cid)
    rng, be = random.Random(41 + group), library(curve)
    gen, _ = generator(curve, group)
    many, distinct_count = (9000, 3000) if group == 1 else (6000, 2000)
    few = [be.mul(gen, rng.randrange(1, curve.r)) for _ in range(40)]
    few += [be.mul(p, curve.r - 1) for p in few[:10]]
    rows = rows_of(curve, group, [few[rng.randrange(len(few))] for _ in range(many)])
    distinct_points = [be.mul(gen, rng.randrange(1, curve.r)) for _ in range(distinct_count)]
    distinct = rows_of(curve, group, distinct_points)
    edges = [1, 2, 3, curve.r - 1, curve.r, 2**256 - 1]
    draws = {
        "random": [rng.randrange(curve.r) for _ in range(many)],
        "edges": [rng.choice([*edges, rng.randrange(2**256)]) for _ in range(many)],
        "bits": [rng.choice([0, 1, 1, rng.randrange(curve.r)]) for _ in range(many)],
    }
    for name, scalars in draws.items():
        for points, n in ((rows, many), (distinct, distinct_count)):
            sc = from_ints(scalars[:n])
            for window, endo in ((0, False), (0, True), (11, False), (12, True)):
                args = (cid, group, points, sc, 2, window, 0, endo)
                assert pair.twin(cm.msm, *args) == pair.fast(cm.msm, *args), (name, n, window, endo)
    scalars = draws["random"][:1500]
    want = library_msm(curve, group, distinct_points[:1500], scalars)
    for endo in (False, True):
        raw = pair.fast(cm.msm, cid, group, distinct[:1500], from_ints(scalars), 2, 0, 0, endo)
        assert coords(curve, raw) == want, endo


@pytest.mark.parametrize("curve", CURVES)
@pytest.mark.parametrize("group", GROUPS)
def test_the_bucket_sums_in_ifma_lanes_meet_doublings_and_cancellations(curve: Curve, group: int) -> None:
    """ifma.h's bucket sums (lane i runs the buckets b = 128·i + j of 1,024): a running sum that meets a
    bucket of equal x, a doubling (P then P) or a cancellation (P then -P), leaves the lanes for the 4-limb
    loop, as does a unit with many overflowing buckets (window 1 here); each way the sum is the group law's.
    4,096 terms, so that window 0 of 11 bits runs batched; only the terms named below have a digit there.
    The cancellation is on a lane's last step, where no later addition would meet the Z = 0 it leaves."""
    cm, cid = extension_module(), CURVE_IDS[curve.name]
    pair = Pair(cm, "ifma-bucket-sums", cid)
    be, rng = library(curve), random.Random(17 + group)
    gen, _ = generator(curve, group)
    p = be.mul(gen, rng.randrange(1, curve.r))
    others = [be.mul(gen, rng.randrange(1, curve.r)) for _ in range(8)]
    cases = {
        "doubling": [(p, 128), (p, 127)],  # bucket 127 then 126, both in lane 0: running P meets P
        # lane 4's last two buckets (513, 512): P then -P, the lane's last step (no later one to notice)
        "cancellation": [(p, 514), (be.mul(p, curve.r - 1), 513)],
        "spread": [(o, 1 + 128 * i + rng.randrange(128)) for i, o in enumerate(others)],  # every lane once
    }
    for name, low in cases.items():
        points = [pt for pt, _ in low] + [others[k % 8] for k in range(4096 - len(low))]
        scalars = [d for _, d in low] + [rng.randrange(1, 2**10) << 11 for _ in range(4096 - len(low))]
        rows, sc = rows_of(curve, group, points), from_ints(scalars)
        lanes = pair.fast(cm.msm, cid, group, rows, sc, 1, 11)
        assert pair.twin(cm.msm, cid, group, rows, sc, 1, 11) == lanes, name
        assert coords(curve, lanes) == library_msm(curve, group, points, scalars), name


@pytest.mark.parametrize("curve", CURVES)
def test_the_coset_values_in_ifma_lanes_equal_the_4_limb_ones(curve: Curve) -> None:
    """csrc/ifma_ntt.h: the coset transforms eight values at a time in AVX-512 IFMA lanes against the same
    call with the 4-limb products: domains from one chunk of 64 values a thread to 2^14, fewer values than
    the domain, values of r and beyond (up to 2^256 - 1), every thread count (wide stages shared or not).
    Domains with fewer than 64 values a thread keep the 4-limb products (test_curvemath's sizes)."""
    cm, ext, rng, r = extension_module(), c_extension(curve), random.Random(12), curve.r
    pair = Pair(cm, "ifma-ntt", CURVE_IDS[curve.name])
    for n, m in ((64, 64), (128, 100), (1024, 1000), (4096, 4096), (1 << 14, 9000)):
        values = [[rng.randrange(2**256) if rng.random() < 0.1 else rng.randrange(r) for _ in range(m)]]
        values += [[rng.randrange(r) for _ in range(m)] for _ in range(2)]
        values[0][0] = 2**256 - 1
        rows = [np.array([[x >> (64 * j) & (2**64 - 1) for j in range(4)] for x in v], "<u8") for v in values]
        for threads in (1, 2, 4, 8):
            lanes = pair.fast(ext.coset_h, *rows, n, threads)
            assert (pair.twin(ext.coset_h, *rows, n, threads) == lanes).all(), (n, threads)


@pytest.mark.parametrize("curve", CURVES)
@pytest.mark.parametrize("group", GROUPS)
def test_the_subgroup_tests_in_ifma_lanes_equal_the_one_point_ones(curve: Curve, group: int) -> None:
    """ifma_subgroup.h: eight points at a time against the one-point test, over subgroup points, points of
    the curve outside it and infinity, one at a time (a partial group of lanes) and in runs that put an
    outsider in every lane position, and rows at an address of no alignment; the one-point test agrees with
    [r]P = 0 (test_subgroup.py)."""
    cm, cid = extension_module(), CURVE_IDS[curve.name]
    pair = Pair(cm, "ifma-subgroup", cid)
    rng, be, q = random.Random(61 + group), library(curve), curve.q
    gen, xy = generator(curve, group)
    extension = group == 2
    b = TWIST_B[curve.name] if extension else (CURVE_B[curve.name], 0)
    inside = [mont_row(curve, xy(be.mul(gen, rng.randrange(1, curve.r)))) for _ in range(40)]
    plain = [ref.random_point(rng, q, b, extension=extension) for _ in range(8)]
    outside = [mont_row(curve, ref.flat(p, extension=extension)) for p in plain]
    zero = np.zeros_like(inside[0])
    cases = [np.stack([row]) for row in [*inside[:3], *outside[:3], zero]]
    for at in range(9):  # an outsider at every lane position, after a run of insiders and infinity
        cases.append(np.stack([*inside[:at], zero, outside[at % 8], *inside[at:]]))
    cases.append(np.stack([*inside, zero]))  # none outside
    for rows in cases:
        unaligned = np.frombuffer(b"\0" * 4 + rows.tobytes(), np.uint8)[4:].reshape(rows.shape)  # any address
        for threads in (1, 2):
            want = pair.twin(cm.first_outside_subgroup, cid, group, rows, threads)
            assert pair.fast(cm.first_outside_subgroup, cid, group, rows, threads) == want
            assert pair.fast(cm.first_outside_subgroup, cid, group, unaligned, threads) == want
