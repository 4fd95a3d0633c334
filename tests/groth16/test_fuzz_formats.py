"""Fuzzing the file parsers: mutations of valid .r1cs, .zkey, .wtns and verification-key JSON either parse or
raise FormatError (the documented error), never anything else. PROOFLANE_FUZZ_EXAMPLES sets how many examples
each parser gets (default 40, for `make check`; e.g. 2000 for a long run)."""

from __future__ import annotations

import copy
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prooflane.errors import FormatError, ProoflaneError
from prooflane.groth16 import (
    BN128,
    VerificationKey,
    read_r1cs,
    read_wtns,
    read_zkey,
    setup,
    write_r1cs,
    write_wtns,
    write_zkey,
)
from tests.support.groth16_samples import square_chain

EXAMPLES = int(os.environ.get("PROOFLANE_FUZZ_EXAMPLES", "40"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_FOLDER = Path(tempfile.mkdtemp(prefix="prooflane-fuzz-"))


def _valid_files() -> dict[str, bytes]:
    r1cs, witness = square_chain(BN128, 4)
    key = setup(r1cs, seed=b"fuzz")
    write_r1cs(_FOLDER / "c.r1cs", r1cs)
    write_wtns(_FOLDER / "w.wtns", witness)
    write_zkey(_FOLDER / "k.zkey", key)
    return {name: (_FOLDER / name).read_bytes() for name in ("c.r1cs", "w.wtns", "k.zkey")}


VALID = _valid_files()
READERS: dict[str, Callable[[Path], object]] = {"c.r1cs": read_r1cs, "w.wtns": read_wtns, "k.zkey": read_zkey}
VK = read_zkey(_FOLDER / "k.zkey").verification_key.to_json()


@st.composite
def mutated(draw: st.DrawFn, original: bytes) -> bytes:
    data = bytearray(original)
    match draw(st.sampled_from(["flip", "truncate", "splice"])):
        case "flip":
            for _ in range(draw(st.integers(1, 8))):
                data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
        case "truncate":
            del data[draw(st.integers(0, len(data) - 1)) :]
        case _:
            at = draw(st.integers(0, len(data)))
            data[at:at] = draw(st.binary(max_size=64))
    return bytes(data)


def _parse(name: str, data: bytes) -> None:
    path = _FOLDER / f"fuzzed-{name}"
    path.write_bytes(data)
    try:
        READERS[name](path)
    except FormatError as exc:
        assert str(path) in str(exc)  # the error names the file


@pytest.mark.parametrize("name", sorted(READERS))
def test_valid_file_parses(name: str) -> None:
    _parse(name, VALID[name])


@pytest.mark.parametrize("name", sorted(READERS))
@FUZZ
@given(data=st.data())
def test_mutated_file_parses_or_raises_format_error(name: str, data: st.DataObject) -> None:
    _parse(name, data.draw(mutated(VALID[name])))


@FUZZ
@given(data=st.binary(max_size=256))
def test_arbitrary_bytes_raise_format_error(data: bytes) -> None:
    for name in READERS:
        _parse(name, data)


def _json_values() -> st.SearchStrategy[Any]:
    leaves = st.none() | st.booleans() | st.integers() | st.text(max_size=20) | st.floats(allow_nan=True)
    return st.recursive(leaves, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner))


@FUZZ
@given(key=st.sampled_from(sorted(VK)), value=_json_values())
def test_verification_key_json_with_a_field_replaced_is_refused_or_means_the_same(
    key: str, value: Any
) -> None:
    doc = copy.deepcopy(VK)
    doc[key] = value
    try:
        parsed = VerificationKey.from_json(doc)
    except ProoflaneError as exc:
        assert "verification key" in str(exc)  # it names what it read
        return
    # Accepted: the value must mean what the original meant (or be a field verifiers recompute).
    assert parsed == VerificationKey.from_json(VK)


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("vk_alpha_1", [0, 0], r"vk_alpha_1: \[0, 0, 1\] is not a finite point of the curve"),
        ("vk_alpha_1", [0, 1], r"vk_alpha_1: \[0, 1, 1\] is not a finite point of the curve"),
        ("vk_alpha_1", [0, 1, 0], r"vk_alpha_1: \[0, 1, 0\] is not a finite point of the curve"),
        ("vk_beta_2", [[0, 0], [0, 0]], "vk_beta_2: not a finite point of the curve's twist"),
        ("IC", [[0, 0]], r"IC\[0\]: \[0, 0, 1\] is not a finite point of the curve"),
    ],
)
def test_a_point_off_the_curve_is_refused_not_read_as_another(key: str, value: Any, says: str) -> None:
    doc = copy.deepcopy(VK)
    doc[key] = value  # (0, 0) was read as infinity, the encoding of it here
    with pytest.raises(FormatError, match=says):
        VerificationKey.from_json(doc)
