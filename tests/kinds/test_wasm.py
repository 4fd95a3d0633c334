"""The circom .wasm reader on modules that are not circom generators (real generators:
``tests/engine/test_registry.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from prooflane.kinds import inspect_wasm


def test_a_file_that_is_no_module_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "junk.wasm"
    path.write_bytes(b"not a module")
    with pytest.raises(ValueError, match="not a WebAssembly module"):
        inspect_wasm(str(path))


def test_a_module_that_exports_no_generator_constants_says_nothing(tmp_path: Path) -> None:
    path = tmp_path / "empty.wasm"
    path.write_bytes(b"\0asm\x01\0\0\0")  # a valid module with no sections
    assert inspect_wasm(str(path)) is None


MAGIC = b"\0asm\x01\0\0\0"


@pytest.mark.parametrize(
    ("tail", "says"),
    [
        (b"\x01" + b"\xff" * 400_000, "the number at byte 9 runs past 5 bytes"),  # once quadratic: 6.7 s
        (b"\x07\xff\xff\xff\xff\x0f", "section 7 at byte 14 runs 4294967295 bytes, past the file's end"),
        (b"\x07\x05ab", "section 7 at byte 10 runs 5 bytes, past the file's end"),
        (b"\x07\x80", "it ends inside a section's header"),
    ],
    ids=["a 400 kB number", "a 4 GiB section", "a section past the end", "a header cut short"],
)
def test_a_module_whose_numbers_or_sections_do_not_add_up_is_refused(
    tmp_path: Path, tail: bytes, says: str
) -> None:
    path = tmp_path / "crafted.wasm"
    path.write_bytes(MAGIC + tail)
    with pytest.raises(ValueError, match="not a WebAssembly module") as refused:
        inspect_wasm(str(path))
    assert says in str(refused.value)


def test_numbers_of_up_to_five_bytes_are_read_and_a_sixth_is_refused() -> None:
    from prooflane.kinds.wasm import _leb

    assert _leb(b"\xff\xff\xff\xff\x0f", 0) == (2**32 - 1, 5)
    assert _leb(b"\x7f", 0, signed=True) == (-1, 1)
    assert _leb(b"\x80\x80\x80\x80\x78", 0, signed=True) == (-(2**31), 5)
    with pytest.raises(ValueError, match="runs past 5 bytes"):
        _leb(b"\x80\x80\x80\x80\x80\x00", 0)


def test_a_file_that_is_not_a_regular_file_is_refused(tmp_path: Path) -> None:
    from prooflane.errors import ProoflaneError

    (tmp_path / "folder.wasm").mkdir()
    with pytest.raises(ProoflaneError, match="expected a regular file"):
        inspect_wasm(str(tmp_path / "folder.wasm"))
    (tmp_path / "short.wasm").write_bytes(b"\0as")
    with pytest.raises(ValueError, match="not a WebAssembly module"):
        inspect_wasm(str(tmp_path / "short.wasm"))


@pytest.mark.parametrize("n32", [8, 2, 1])
def test_a_generators_wires_become_the_provers_field_vector_unchanged(n32: int) -> None:
    """Wires of ``n32`` 32-bit words each, least significant first, are the same numbers as a FieldVector."""
    from prooflane.groth16.field import to_ints
    from prooflane.kinds.wasm_witness import _field_vector

    values = [0, 1, 2**31 + 5, (1 << (32 * n32)) - 1, 12345678901234567 % (1 << (32 * n32))]
    raw = b"".join(v.to_bytes(4 * n32, "little") for v in values)
    vector = _field_vector(raw, len(values), n32)
    assert vector.shape == (len(values), 4) and vector.flags.c_contiguous
    assert to_ints(vector) == values


def test_a_field_wider_than_256_bits_is_refused() -> None:
    from prooflane.kinds.wasm_witness import _field_vector

    with pytest.raises(ValueError, match="more than 256 bits"):
        _field_vector(b"\0" * 36, 1, 9)
