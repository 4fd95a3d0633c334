"""Loading a key's sections on each arithmetic: validated in full, remembered; the libraries' points
written raw from the key's bytes."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from prooflane.errors import FormatError, ProoflaneError
from prooflane.groth16 import BLS12381, BN128, Curve, ProvingKey, _pointcheck, adapters, prove, setup, verify
from prooflane.groth16._rawpoints import RawWriter
from prooflane.groth16._sections import SectionCache
from prooflane.groth16.adapters import library
from prooflane.groth16.points import TWIST_B, mont_row, plain_coordinates
from prooflane.groth16.prover import check_points, preload, release
from prooflane.groth16.zkey import write_zkey
from prooflane.kinds import inspect_zkey
from tests.support.curve_reference import fq2_mul, fq2_sqrt
from tests.support.groth16_samples import square_chain

CURVES = [pytest.param(BN128, id="bn128"), pytest.param(BLS12381, id="bls12381")]


@pytest.mark.parametrize("curve", CURVES)
def test_points_written_raw_equal_the_library_s_checked_points(curve: Curve) -> None:
    key = setup(square_chain(curve, 6)[0], seed=b"raw")
    be = library(curve)
    assert (be.loader(1), be.loader(2)) == ("raw", "raw")
    for rows, group in ((key.a_points, 1), (key.h_points, 1), (key.b2_points, 2)):
        rows = rows[np.flatnonzero(rows.any(axis=1))]
        make = be.g1 if group == 1 else be.g2
        checked = [make(c) for c in plain_coordinates(curve, rows)]  # type: ignore[arg-type]
        raw = be.points(rows, group)
        assert len(raw) == len(checked) > 0
        assert all(a == b for a, b in zip(raw, checked, strict=True))


@pytest.mark.parametrize("curve", CURVES)
def test_a_base_point_off_the_curve_is_refused_at_load(curve: Curve, arithmetic: str) -> None:
    key = setup(square_chain(curve, 6)[0], seed=b"off-curve")
    rows = key.h_points.copy()
    rows[3, 5] ^= 1  # one bit of point 3's x
    bad = dataclasses.replace(key, h_points=rows)
    with pytest.raises(FormatError, match="section h: point 3 is not on the curve") as info:
        preload(bad, ("h",))
    assert isinstance(info.value, ProoflaneError)
    preload(key, ("h",))  # the key it came from loads


def _bls_g1_point_outside_the_subgroup() -> tuple[int, int]:
    """A point of y^2 = x^3 + 4 over BLS12-381's Fq of order not dividing r (the cofactor is not 1)."""
    q = BLS12381.q
    for x in range(1, 100):
        rhs = (x**3 + 4) % q
        y = pow(rhs, (q + 1) // 4, q)  # q = 3 mod 4
        if y * y % q == rhs:
            return x, y
    raise AssertionError("no point found")


def _bn_twist_point_outside_g2() -> tuple[int, int, int, int]:
    """A point of BN254's twist y^2 = x^3 + 3/(9+u) over Fq2 outside G2 (its cofactor is 2q - r)."""
    q, b = BN128.q, TWIST_B["bn128"]
    for x0 in range(1, 200):
        x = (x0, 1)
        rhs = fq2_mul(fq2_mul(x, x, q), x, q)
        y = fq2_sqrt(((rhs[0] + b[0]) % q, (rhs[1] + b[1]) % q), q)
        if y is not None:
            return (x[0], x[1], y[0], y[1])
    raise AssertionError("no point found")


def _with_row(key: ProvingKey, name: str, index: int, coords: tuple[int, ...]) -> ProvingKey:
    rows = getattr(key, f"{name}_points").copy()
    rows[index] = mont_row(key.curve, coords)
    return dataclasses.replace(key, **{f"{name}_points": rows})


@pytest.mark.parametrize(
    ("curve", "section"),
    [pytest.param(BN128, "b2", id="bn128-g2"), pytest.param(BLS12381, "c", id="bls12381-g1")],
)
def test_a_point_outside_the_subgroup_is_refused_and_not_remembered(
    memo: Path, curve: Curve, section: str, arithmetic: str
) -> None:
    key = setup(square_chain(curve, 6)[0], seed=b"subgroup")
    point = _bn_twist_point_outside_g2() if curve == BN128 else _bls_g1_point_outside_the_subgroup()
    bad = _with_row(key, section, 2, point)
    with pytest.raises(FormatError, match=f"section {section}: point 2 is not in the subgroup"):
        preload(bad, (section,))
    assert not _pointcheck.known(bad.digest, section)
    assert not any(p.name.startswith(bad.digest) for p in memo.glob("*"))


def test_a_key_is_checked_once_then_remembered_across_processes(memo: Path, arithmetic: str) -> None:
    key = setup(square_chain(BN128, 6)[0], seed=b"memo")
    fresh = dataclasses.replace(key, contributions=b"\x01" * 68)  # same points, unknown to the memory
    assert fresh.digest == key.digest  # the digest covers the points, not the contributions
    assert (memo / f"{key.digest}.b2").exists()  # setup vouches for the points it made
    for path in memo.glob("*"):
        path.unlink()
    _pointcheck._KNOWN.clear()
    assert not _pointcheck.known(fresh.digest, "b2")
    check_points(fresh)
    assert (memo / f"{fresh.digest}.b2").exists()
    _pointcheck._KNOWN.clear()  # as in a new process: only the folder remembers
    assert _pointcheck.known(fresh.digest, "b2") and _pointcheck.known(fresh.digest, "b2[0:3]")
    assert _pointcheck.known(fresh.digest, "b1")  # BN254 G1 too: on the curve is in the group


def test_nothing_is_remembered_across_processes_when_the_folder_is_switched_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(_pointcheck.ENV, "")
    assert _pointcheck.memo_dir() is None
    monkeypatch.delenv(_pointcheck.ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", "/somewhere")
    assert _pointcheck.memo_dir() == Path("/somewhere/prooflane/point-checks")


@pytest.mark.parametrize("curve", CURVES)
def test_a_failed_self_check_falls_back_to_the_checked_constructors(
    monkeypatch: pytest.MonkeyPatch, curve: Curve, library_only: None
) -> None:
    monkeypatch.setattr(RawWriter, "expected_size", lambda self: 1)  # as if the library's layout changed
    monkeypatch.setattr(adapters, "_LIBRARIES", {})
    be = library(curve)
    assert be.loader(1).startswith("checked (") and "bytes, not 1" in be.loader(1)
    assert be.writer(2) is None
    r1cs, witness = square_chain(curve, 6)
    key = setup(r1cs, seed=b"fallback")
    try:
        proof = prove(key, witness)
        assert verify(key.verification_key, proof.public, proof)
        rows = key.a_points.copy()
        rows[1, 0] ^= 1
        with pytest.raises(FormatError, match="section a: point 1 is not on the curve"):
            preload(dataclasses.replace(key, a_points=rows), ("a",))
    finally:
        release(key)


def test_registering_a_key_checks_its_points(memo: Path, tmp_path: Path, arithmetic: str) -> None:
    key = setup(square_chain(BN128, 6)[0], seed=b"register")
    for path in memo.glob("*"):
        path.unlink()
    good, bad = tmp_path / "good.zkey", tmp_path / "bad.zkey"
    write_zkey(good, key)
    write_zkey(bad, _with_row(key, "b2", 1, _bn_twist_point_outside_g2()))
    _pointcheck._KNOWN.clear()
    assert inspect_zkey("circom:good", str(good)).curve == "bn128"
    assert (memo / f"{key.digest}.b2").exists()
    with pytest.raises(FormatError, match="section b2: point 1 is not in the subgroup"):
        inspect_zkey("circom:bad", str(bad))


def test_the_section_cache_keeps_the_last_keys_used_and_builds_each_section_once() -> None:
    built: list[tuple[str, str]] = []

    def build(digest: str, name: str) -> Callable[[], str]:
        def make() -> str:
            built.append((digest, name))
            return f"{digest}/{name}"

        return make

    cache: SectionCache[str] = SectionCache(2, "loaded here")
    assert cache.get("k1", "a", build("k1", "a")) == "k1/a"
    assert cache.get("k1", "a", build("k1", "a")) == "k1/a"  # held: not built again
    cache.get("k1", "h", build("k1", "h"))
    cache.get("k2", "a", build("k2", "a"))
    cache.get("k1", "a", None)  # k1 is now the newest key
    cache.get("k3", "a", build("k3", "a"))  # a third key evicts the oldest, k2, whole
    assert [cache.holds(d, n) for d, n in [("k1", "a"), ("k1", "h"), ("k2", "a"), ("k3", "a")]] == [
        True, True, False, True,
    ]  # fmt: skip
    assert built == [("k1", "a"), ("k1", "h"), ("k2", "a"), ("k3", "a")]
    with pytest.raises(LookupError, match="bases a of key k2 are not loaded here"):
        cache.get("k2", "a", None)
    cache.release("k1")
    assert not cache.holds("k1", "a") and not cache.holds("k1", "h") and cache.holds("k3", "a")
