"""Subgroup checks of a key's points: BN254 G2 by random linear combinations, BLS12-381 by the library's
per-point test, each cross-checked against ``[r]P = 0`` and plain-Python arithmetic."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from prooflane.errors import FormatError
from prooflane.groth16 import BLS12381, BN128, Curve, _pointcheck, prove, setup, verify
from prooflane.groth16.adapters import library
from prooflane.groth16.arithmetic import Arithmetic
from prooflane.groth16.field import from_ints, to_ints
from prooflane.groth16.points import CURVE_B, TWIST_B, BadPoint, mont_row
from tests.support import curve_reference as ref
from tests.support import kernels
from tests.support.arithmetics import c_extension, extension_module, libraries
from tests.support.groth16_samples import square_chain

BN_B2 = TWIST_B["bn128"]
BN_COFACTOR = 2 * BN128.q - BN128.r
SEED = 20261201


def _probably_prime(n: int) -> bool:
    """Miller-Rabin with 20 fixed bases (a composite passes with probability below 4^-20)."""
    if n < 2 or any(n % p == 0 for p in (2, 3, 5, 7)):
        return n in (2, 3, 5, 7)
    d, s = n - 1, 0
    while d % 2 == 0:
        d, s = d // 2, s + 1
    for a in random.Random(n).sample(range(2, min(n - 1, 10**6)), 20):
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def _library_points(curve: Curve, coords: list[tuple[int, ...]], group: int) -> list[Any]:
    """Library points written raw from plain coordinates (no validation: points outside G2 included)."""
    be = library(curve)
    assert be.loader(group) == "raw"
    return be.points(np.stack([mont_row(curve, c) for c in coords]), group)


def _bn_outsiders(rng: random.Random, count: int) -> list[tuple[ref.Fq2, ref.Fq2]]:
    return [ref.random_point(rng, BN128.q, BN_B2, extension=True) for _ in range(count)]


def _bn_insiders(rng: random.Random, count: int) -> list[Any]:
    be = library(BN128)
    gen = be.g2(be.g2_gen)
    return [gen * rng.randrange(1, BN128.r) for _ in range(count)]


def _to_ref(be: Any, point: Any) -> tuple[ref.Fq2, ref.Fq2]:
    c = be.g2_xy(point)
    return ((c[0], c[1]), (c[2], c[3]))


def test_the_bn254_g2_cofactor_is_the_product_of_the_primes_named() -> None:
    primes = _pointcheck.BN254_G2_COFACTOR_PRIMES
    assert math.prod(primes) == BN_COFACTOR and all(_probably_prime(p) for p in primes)
    assert len(set(primes)) == len(primes) and math.gcd(BN_COFACTOR, BN128.r) == 1  # cyclic, r^2 absent
    rounds, bits = _pointcheck.combination_plan(min(primes))
    assert rounds * bits >= _pointcheck.SECURITY_BITS and 2**bits < min(primes)
    point = ref.random_point(random.Random(SEED), BN128.q, BN_B2, extension=True)
    assert ref.mul(point, BN128.r, BN128.q) is not None  # outside G2
    assert ref.mul(point, BN128.r * BN_COFACTOR, BN128.q) is None  # the twist's group has order r·h


def test_the_library_s_arithmetic_outside_g2_is_the_group_law() -> None:
    rng, be, q = random.Random(SEED + 1), library(BN128), BN128.q
    outsiders = _bn_outsiders(rng, 4)
    points = _library_points(BN128, [ref.flat(p, extension=True) for p in outsiders], 2)
    for plain, point in zip(outsiders, points, strict=True):
        k = rng.randrange(BN128.r)
        assert _to_ref(be, point * k) == ref.mul(plain, k, q)
        assert (point * (BN128.r - 1) + point).is_zero() is False
    scalars = to_ints(_pointcheck.random_scalars(len(points), _pointcheck.MAX_SCALAR_BITS))
    expected = None
    for plain, k in zip(outsiders, scalars, strict=True):
        expected = ref.add(expected, ref.mul(plain, k, q), q)
    assert _to_ref(be, be._ec.multiscalar_mul_g2(points, scalars)) == expected  # type: ignore[attr-defined]


def _rows_of(curve: Curve, coords: Sequence[tuple[int, ...]]) -> NDArray[np.uint8]:
    return np.stack([mont_row(curve, c) for c in coords])


def _first_outside(arith: Arithmetic, rows: NDArray[np.uint8], group: int) -> int | None:
    """The row a section's check refuses as outside the subgroup, or None when it passes."""
    try:
        arith.section(rows, group, checked=False)
    except BadPoint as bad:
        assert "subgroup" in bad.problem
        return bad.index
    return None


ARITHMETICS = [pytest.param(c_extension, id="c-extension"), pytest.param(libraries, id="libraries")]


@functools.cache
def _bn_cases() -> tuple[tuple[tuple[int, ...], bool], ...]:
    """150 twist points outside G2 and 150 inside, as plain coordinates, each with whether it is inside."""
    rng, lib = random.Random(SEED + 2), library(BN128)
    outsiders = [ref.flat(p, extension=True) for p in _bn_outsiders(rng, 150)]
    insiders = [lib.g2_xy(p) for p in _bn_insiders(rng, 150)]
    return tuple([(c, False) for c in outsiders] + [(c, True) for c in insiders])


def test_the_library_s_r_times_p_check_agrees_with_plain_python() -> None:
    cases, lib = _bn_cases(), library(BN128)
    for point, (_, inside) in zip(_library_points(BN128, [c for c, _ in cases], 2), cases, strict=True):
        assert (lib.first_outside_subgroup([point], 2) is None) is inside  # [r]P = 0 on each
    for coords, inside in cases[:3] + cases[-3:]:  # and the slow check against plain Python
        plain = ((coords[0], coords[1]), (coords[2], coords[3]))
        assert (ref.mul(plain, BN128.r, BN128.q) is None) is inside


@pytest.mark.parametrize("make", ARITHMETICS)
def test_the_combination_check_agrees_with_r_times_p_on_random_points(make: Any) -> None:
    cases, arith = _bn_cases(), make(BN128)
    for coords, inside in cases:
        assert (_first_outside(arith, _rows_of(BN128, [coords]), 2) is None) is inside
    insiders = [c for c, inside in cases if inside]
    rows = np.concatenate([_rows_of(BN128, insiders), np.zeros((1, 128), np.uint8)])  # zeros: infinity
    assert _first_outside(arith, rows, 2) is None
    rows[7] = mont_row(BN128, cases[0][0])
    assert _first_outside(arith, rows, 2) == 7


def _small_order_point(rng: random.Random, prime: int) -> tuple[ref.Fq2, ref.Fq2]:
    """A twist point of order ``prime`` (a prime of the cofactor)."""
    while True:
        point = ref.mul(_bn_outsiders(rng, 1)[0], BN128.r * BN_COFACTOR // prime, BN128.q)
        if point is not None:
            assert ref.mul(point, prime, BN128.q) is None
            return point


@pytest.mark.parametrize("make", ARITHMETICS)
@pytest.mark.parametrize("prime", _pointcheck.BN254_G2_COFACTOR_PRIMES[:2])
def test_the_smallest_cofactor_components_are_caught_among_many_points(prime: int, make: Any) -> None:
    rng, lib, q, arith = random.Random(SEED + prime), library(BN128), BN128.q, make(BN128)
    good = [_to_ref(lib, p) for p in _bn_insiders(rng, 300)]
    rows = np.stack([mont_row(BN128, ref.flat(p, extension=True)) for p in good])
    assert _first_outside(arith, rows, 2) is None
    torsion = _small_order_point(rng, prime)
    minus = (torsion[0], ((-torsion[1][0]) % q, (-torsion[1][1]) % q))
    for i, t in ((17, torsion), (250, minus)):  # their small components cancel in a plain sum
        rows[i] = mont_row(BN128, ref.flat(ref.add(good[i], t, q), extension=True))  # type: ignore[arg-type]
    assert _first_outside(arith, rows, 2) == 17
    rows[17] = mont_row(BN128, ref.flat(good[17], extension=True))
    assert _first_outside(arith, rows, 2) == 250


@functools.cache
def _bls_cases(group: int) -> tuple[list[tuple[int, ...]], list[bool]]:
    """32 random points of the curve (or twist) and 32 of the subgroup, as plain coordinates, and whether each
    is inside by ``[r]P = 0`` in plain Python (computed once, for every arithmetic's test)."""
    rng, be, q = random.Random(SEED + group), library(BLS12381), BLS12381.q
    extension = group == 2
    b = TWIST_B["bls12381"] if extension else (CURVE_B["bls12381"], 0)
    outsiders = [ref.random_point(rng, q, b, extension=extension) for _ in range(32)]
    gen = be.g1(be.g1_gen) if group == 1 else be.g2(be.g2_gen)
    xy = be.g1_xy if group == 1 else be.g2_xy
    insiders = [xy(be.mul(gen, rng.randrange(1, BLS12381.r))) for _ in range(32)]
    coords: list[tuple[int, ...]] = [ref.flat(p, extension=extension) for p in outsiders]
    coords += insiders
    inside = []
    for c in coords:
        plain = ((c[0], c[1]), (c[2], c[3])) if extension else ((c[0], 0), (c[1], 0))
        inside.append(ref.mul(plain, BLS12381.r, q) is None)
    assert inside == [i >= 32 for i in range(64)]
    return coords, inside


@pytest.mark.parametrize("group", [1, 2])
def test_bls12_381_s_library_subgroup_test_agrees_with_r_times_p_on_random_points(group: int) -> None:
    coords, inside = _bls_cases(group)
    be = library(BLS12381)
    points = _library_points(BLS12381, coords, group)
    assert [be.first_outside_subgroup([p], group) is None for p in points] == inside


@pytest.mark.parametrize("ifma", [False, True])
@pytest.mark.parametrize("make", ARITHMETICS)
@pytest.mark.parametrize("group", [1, 2])
def test_bls12_381_s_subgroup_test_agrees_with_r_times_p_on_random_points(
    group: int, make: Any, ifma: bool
) -> None:
    with _ifma(ifma) if make is c_extension else contextlib.nullcontext():
        _agrees_with_r_times_p(group, make)


def _agrees_with_r_times_p(group: int, make: Any) -> None:
    coords, inside = _bls_cases(group)
    rows, arith = _rows_of(BLS12381, coords), make(BLS12381)
    sample = range(0, 64, 5)
    said = [_first_outside(arith, rows[i : i + 1], group) is None for i in sample]
    assert said == [inside[i] for i in sample]
    order = [*range(32, 50), 0, *range(50, 64)]
    assert _first_outside(arith, rows[order], group) == 18


def _bad_key(curve: Curve, name: str, row: int, coords: tuple[int, ...], seed: bytes) -> Any:
    key = setup(square_chain(curve, 12)[0], seed=seed)
    rows = getattr(key, f"{name}_points").copy()
    rows[row] = mont_row(curve, coords)
    return dataclasses.replace(key, **{f"{name}_points": rows})


def test_an_unseen_key_proves_and_is_remembered(memo: Path, arithmetic: str) -> None:
    r1cs, witness = square_chain(BN128, 12)
    key = setup(r1cs, seed=f"unseen, {arithmetic}".encode())
    for path in memo.glob("*"):
        path.unlink()
    _pointcheck._KNOWN.clear()
    proof = prove(key, witness, threads=2)
    assert verify(key.verification_key, proof.public, proof)
    remembered = {path.name.split(".", 1)[1] for path in memo.glob(f"{key.digest}.*")}
    assert remembered == {"a", "b1", "b2", "c", "h"}  # whole sections
    assert verify(key.verification_key, proof.public, prove(key, witness, threads=2))


@pytest.mark.parametrize(
    ("name", "problem"),
    [("b2", "is not in the subgroup"), ("b2", "is not on the curve"), ("c", "is not on the curve")],
)
def test_a_bad_key_is_refused_every_time(memo: Path, name: str, problem: str, arithmetic: str) -> None:
    if "subgroup" in problem:
        coords = ref.flat(_bn_outsiders(random.Random(SEED), 1)[0], extension=True)
    else:
        coords = (1, 2, 3, 4) if name == "b2" else (1, 3)
    key = _bad_key(BN128, name, 1, coords, f"bad {name} {problem}".encode())
    witness = square_chain(BN128, 12)[1]
    for _ in range(2):  # nothing of a refused section is kept: the refusal stays
        with pytest.raises(FormatError, match=f"section {name}: point 1 {problem}"):
            prove(key, witness, threads=2)
    assert not _pointcheck.known(key.digest, name)
    assert not any(path.name.startswith(f"{key.digest}.{name}") for path in memo.glob("*"))


# BLS12-381's cofactors: G1's h1 = (x - 1)^2 / 3 and the twist's h2, with their smallest primes.
BLS_X = -0xD201000000010000
BLS_H1 = (BLS_X - 1) ** 2 // 3
BLS_G1_SMALL_PRIMES = (3, 11, 10177)
BLS_H2 = (
    BLS_X**8 - 4 * BLS_X**7 + 5 * BLS_X**6 - 4 * BLS_X**4 + 6 * BLS_X**3 - 4 * BLS_X**2 - 4 * BLS_X + 13
) // 9
BLS_G2_SMALL_PRIMES = (13, 23, 2713)


def _bls_mul(group: int, coords: tuple[int, ...], k: int) -> tuple[int, ...]:
    """``[k]P`` for P of plain coordinates on BLS12-381's curve (1) or twist (2), any k >= 0, by the C MSM
    (the group law on every point of the curve, also outside the subgroup) in steps of 255 bits."""
    arith, zero = c_extension(BLS12381), (0,) * (2 * group)
    acc, shift = zero, 2**255
    for j in reversed(range(max(1, (k.bit_length() + 254) // 255))):
        digit = (k >> (255 * j)) % shift
        rows = np.stack([mont_row(BLS12381, acc), mont_row(BLS12381, coords)])
        acc = tuple(arith.msm_rows(rows, from_ints([shift if acc != zero else 0, digit]), group, 1))
    return acc


def _bls_small_order_point(rng: random.Random, group: int, prime: int) -> tuple[int, ...]:
    """Plain coordinates of a point of the curve (group 1) or twist (2) of order ``prime``, a prime of the
    cofactor."""
    q, extension = BLS12381.q, group == 2
    b = TWIST_B["bls12381"] if extension else (CURVE_B["bls12381"], 0)
    cofactor, zero = BLS_H2 if extension else BLS_H1, (0,) * (2 * group)
    assert cofactor % prime == 0
    power = prime
    while cofactor % (power * prime) == 0:  # the p-part may not be cyclic: go down from all of it
        power *= prime
    while True:
        start = ref.flat(ref.random_point(rng, q, b, extension=extension), extension=extension)
        point = _bls_mul(group, start, BLS12381.r * cofactor // power)
        if point == zero:
            continue
        while (times := _bls_mul(group, point, prime)) != zero:
            point = times
        return point


def _ifma(on: bool) -> contextlib.AbstractContextManager[None]:
    """The C extension's eight-lane subgroup tests (cpu.h's kernel "ifma-subgroup") on or off; on, where
    the CPU or the build lacks AVX-512 IFMA, the test is skipped saying so (failed under
    PROOFLANE_EXPECT_IFMA=1), not run on the one-point test a second time."""
    return kernels.switched(extension_module(), "ifma-subgroup", on)


@pytest.mark.parametrize("ifma", [False, True])
@pytest.mark.parametrize("group", [1, 2])
def test_bls12_381_s_endomorphism_test_refuses_small_components_hidden_in_subgroup_points(
    group: int, ifma: bool
) -> None:
    """The C extension's per-point test (φ(P) = [-x²]P on G1, ψ(Q) = [x]Q on G2): a subgroup point plus a
    point of each small cofactor order is refused, and named, among subgroup points and infinity; so is
    the small point itself (its multiples meet ±P and infinity: the cases the eight-lane G1 test leaves to
    the one-point test). With the IFMA lanes and without."""
    with _ifma(ifma):
        _refuses_small_components(group)


def _refuses_small_components(group: int) -> None:
    rng, be, arith = random.Random(SEED + 7 * group), library(BLS12381), c_extension(BLS12381)
    gen = be.g1(be.g1_gen) if group == 1 else be.g2(be.g2_gen)
    xy = be.g1_xy if group == 1 else be.g2_xy
    coords = [tuple(xy(be.mul(gen, rng.randrange(1, BLS12381.r)))) for _ in range(40)]
    rows = np.concatenate(
        [_rows_of(BLS12381, coords), np.zeros((1, 96 * group), np.uint8)]
    )  # zeros: infinity
    assert _first_outside(arith, rows, group) is None
    for n, prime in enumerate(BLS_G2_SMALL_PRIMES if group == 2 else BLS_G1_SMALL_PRIMES):
        small = _bls_small_order_point(rng, group, prime)
        pair = np.stack([rows[5 + n], mont_row(BLS12381, small)])
        bad = tuple(arith.msm_rows(pair, from_ints([1, 1]), group, 1))
        assert _bls_mul(group, bad, BLS12381.r) != (0,) * (2 * group)  # outside, by [r]P = 0
        spoiled = rows.copy()
        spoiled[5 + n] = mont_row(BLS12381, bad)
        assert _first_outside(arith, spoiled, group) == 5 + n, prime
        spoiled[30], spoiled[5 + n] = spoiled[5 + n], rows[5 + n]
        assert _first_outside(arith, spoiled, group) == 30, prime
        spoiled[30], spoiled[17] = rows[30], mont_row(BLS12381, small)
        assert _first_outside(arith, spoiled, group) == 17, prime
