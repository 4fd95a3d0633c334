"""Round trips of .r1cs/.wtns/.zkey and the JSON shapes, and the errors bad files give."""

from __future__ import annotations

import json
import mmap
import os
import struct
from pathlib import Path

import numpy as np
import pytest

from prooflane.errors import FormatError, InvalidWitnessError
from prooflane.groth16 import (
    BLS12381,
    BN128,
    Curve,
    Proof,
    VerificationKey,
    _binfile,
    prove,
    read_r1cs,
    read_wtns,
    read_zkey,
    setup,
    synthesize,
    write_r1cs,
    write_wtns,
    write_zkey,
)
from tests.support.groth16_samples import square_chain

CURVES = [pytest.param(BN128, id="bn128"), pytest.param(BLS12381, id="bls12381")]


@pytest.mark.parametrize("curve", CURVES)
def test_r1cs_and_wtns_round_trip(curve: Curve, tmp_path: Path) -> None:
    r1cs, witness = square_chain(curve, 6)
    write_r1cs(tmp_path / "c.r1cs", r1cs)
    write_wtns(tmp_path / "w.wtns", witness)
    back, wit = read_r1cs(tmp_path / "c.r1cs"), read_wtns(tmp_path / "w.wtns")
    assert back.curve == curve and back.n_constraints == r1cs.n_constraints and back.n_public == 2
    for m1, m2 in ((back.a, r1cs.a), (back.b, r1cs.b), (back.c, r1cs.c)):
        assert np.array_equal(m1.rows, m2.rows) and np.array_equal(m1.cols, m2.cols)
        assert np.array_equal(m1.values, m2.values)
    assert wit.curve == curve and np.array_equal(wit.values, witness.values)


@pytest.mark.parametrize("curve", CURVES)
def test_zkey_round_trip_keeps_every_section(curve: Curve, tmp_path: Path) -> None:
    key = setup(square_chain(curve, 5)[0], seed=b"round trip")
    write_zkey(tmp_path / "k.zkey", key)
    back = read_zkey(tmp_path / "k.zkey")
    assert back.digest == key.digest
    assert back.verification_key == key.verification_key
    assert np.array_equal(back.coefficients.value, key.coefficients.value)
    write_zkey(tmp_path / "again.zkey", back)
    assert (tmp_path / "again.zkey").read_bytes() == (tmp_path / "k.zkey").read_bytes()


def test_a_key_read_where_no_thread_starts_is_hashed_on_the_reading_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """read_zkey hashes the bases on a thread of its own beside the coefficients; where the system refuses
    the thread (a process short of memory), the same digest comes from the thread that asks for it."""
    key = setup(square_chain(BN128, 5)[0], seed=b"no thread")
    write_zkey(tmp_path / "k.zkey", key)

    def refuse(*_: object, **__: object) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr("concurrent.futures.ThreadPoolExecutor.submit", refuse)
    assert read_zkey(tmp_path / "k.zkey").digest == key.digest


def test_setup_is_deterministic_with_a_seed() -> None:
    r1cs = square_chain(BN128, 3)[0]
    assert setup(r1cs, seed=b"a").digest == setup(r1cs, seed=b"a").digest
    assert setup(r1cs, seed=b"a").digest != setup(r1cs, seed=b"b").digest


@pytest.mark.parametrize("curve", CURVES)
def test_json_shapes_round_trip(curve: Curve) -> None:
    r1cs, witness = square_chain(curve, 4)
    key = setup(r1cs, seed=b"json")
    proof = prove(key, witness, randomness=(3, 4))
    data = json.loads(json.dumps(proof.to_json()))
    assert data["protocol"] == "groth16" and data["curve"] == curve.name
    assert data["pi_a"][2] == "1" and data["pi_b"][2] == ["1", "0"]
    assert Proof.from_json(data, public=proof.public) == proof
    vk = json.loads(json.dumps(key.verification_key.to_json()))
    assert vk["nPublic"] == 2 and len(vk["IC"]) == 3
    assert VerificationKey.from_json(vk) == key.verification_key
    assert proof.public_json() == [str(v) for v in proof.public]


def test_wrong_magic_names_the_file(tmp_path: Path) -> None:
    witness = square_chain(BN128, 2)[1]
    write_wtns(tmp_path / "w.wtns", witness)
    with pytest.raises(FormatError, match=r"w\.wtns: wrong magic") as info:
        read_zkey(tmp_path / "w.wtns")
    assert info.value.path.endswith("w.wtns")


@pytest.mark.parametrize("cut", [5, 20, 200])
def test_truncated_file_is_a_format_error(tmp_path: Path, cut: int) -> None:
    key = setup(square_chain(BN128, 3)[0], seed=b"cut")
    write_zkey(tmp_path / "k.zkey", key)
    data = (tmp_path / "k.zkey").read_bytes()
    (tmp_path / "cut.zkey").write_bytes(data[: len(data) - cut])
    with pytest.raises(FormatError, match=r"cut\.zkey: (truncated|section|too short)"):
        read_zkey(tmp_path / "cut.zkey")


def test_truncated_section_header_is_named(tmp_path: Path) -> None:
    (tmp_path / "x.r1cs").write_bytes(b"r1cs" + struct.pack("<II", 1, 2) + struct.pack("<IQ", 1, 4) + b"abcd")
    with pytest.raises(FormatError, match="truncated section header"):
        read_r1cs(tmp_path / "x.r1cs")


def test_missing_file_is_a_format_error(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match="cannot read"):
        read_wtns(tmp_path / "absent.wtns")


def test_curve_mismatch_between_key_and_witness() -> None:
    key = setup(square_chain(BN128, 3)[0], seed=b"mix")
    _, other = square_chain(BLS12381, 3)
    with pytest.raises(InvalidWitnessError, match="bls12381"):
        synthesize(key, other)


def test_witness_length_must_match_the_key() -> None:
    key = setup(square_chain(BN128, 3)[0], seed=b"len")
    _, longer = square_chain(BN128, 4)
    with pytest.raises(InvalidWitnessError, match=r"8 values.*7"):
        synthesize(key, longer)


def test_bad_json_fields_are_named() -> None:
    with pytest.raises(FormatError, match=r"proof\.json: pi_a"):
        Proof.from_json({"pi_a": ["x"], "pi_b": [], "pi_c": [], "curve": "bn128"}, source="proof.json")
    with pytest.raises(FormatError, match=r"vk\.json: missing field 'IC'"):
        VerificationKey.from_json({"protocol": "groth16", "curve": "bn128"}, source="vk.json")
    with pytest.raises(FormatError, match="does not match"):
        Proof.from_json({"curve": "bn128"}, curve=BLS12381)


def _backing(array: np.ndarray) -> object:
    """What the array's bytes belong to, through its views."""
    base: object = array
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return base.obj if isinstance(base, memoryview) else base


def test_a_large_file_is_mapped_and_a_key_replaced_by_rename_leaves_it_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "k.zkey"
    write_zkey(path, setup(square_chain(BN128, 5)[0], seed=b"mapped"))
    read = read_zkey(path)  # below MAP_BYTES: read into memory
    monkeypatch.setattr(_binfile, "MAP_BYTES", 1)
    mapped = read_zkey(path)
    assert isinstance(_backing(mapped.a_points), mmap.mmap)
    assert not isinstance(_backing(read.a_points), mmap.mmap)
    assert mapped.digest == read.digest and mapped.verification_key == read.verification_key
    rows = {name: np.array(getattr(mapped, name)) for name in ("a_points", "b2_points", "h_points")}
    # Replaced the way prooflane replaces a key (a new file renamed over it): the mapping keeps the old one.
    other = tmp_path / "other.zkey"
    write_zkey(other, setup(square_chain(BN128, 5)[0], seed=b"another"))
    os.replace(other, path)
    for name, before in rows.items():
        assert np.array_equal(getattr(mapped, name), before)
    assert read_zkey(path).digest != mapped.digest


def test_a_truncated_mapped_file_is_a_format_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_binfile, "MAP_BYTES", 1)
    write_zkey(tmp_path / "k.zkey", setup(square_chain(BN128, 3)[0], seed=b"cut"))
    data = (tmp_path / "k.zkey").read_bytes()
    (tmp_path / "cut.zkey").write_bytes(data[:-40])
    with pytest.raises(FormatError, match=r"cut\.zkey: (truncated|section)"):
        read_zkey(tmp_path / "cut.zkey")
    (tmp_path / "empty.zkey").write_bytes(b"")
    with pytest.raises(FormatError, match="too short"):
        read_zkey(tmp_path / "empty.zkey")
