"""The circom .wasm reader on modules that are not circom generators (real generators:
``tests/engine/test_registry.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from prooflane.kinds import inspect_wasm
from tests.support.wasm_modules import MAGIC, generator_wasm, name, section, vector


def test_a_file_that_is_no_module_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "junk.wasm"
    path.write_bytes(b"not a module")
    with pytest.raises(ValueError, match="not a WebAssembly module"):
        inspect_wasm(str(path))


def test_a_module_that_exports_no_generator_constants_says_nothing(tmp_path: Path) -> None:
    path = tmp_path / "empty.wasm"
    path.write_bytes(b"\0asm\x01\0\0\0")  # a valid module with no sections
    assert inspect_wasm(str(path)) is None


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


class _Counted(bytes):
    """A module's bytes that count how often each of them is read (by index, or in a slice), standing in for
    the mapped file."""

    def __new__(cls, data: bytes) -> _Counted:
        counted = super().__new__(cls, data)
        counted.reads = [0] * len(data)
        return counted

    reads: list[int]

    def __getitem__(self, key: int | slice) -> Any:  # type: ignore[override]
        for i in range(*key.indices(len(self))) if isinstance(key, slice) else (key,):
            self.reads[i] += 1
        return bytes.__getitem__(self, key)

    def __enter__(self) -> _Counted:
        return self

    def __exit__(self, *_: object) -> None:
        return None


def _read_counted(monkeypatch: pytest.MonkeyPatch, path: Path) -> list[int]:
    """How often ``inspect_wasm`` reads each byte of the module at ``path`` (mapped as it maps it)."""
    import mmap
    from types import SimpleNamespace

    from prooflane.kinds import wasm

    counted = _Counted(path.read_bytes())
    fake = SimpleNamespace(mmap=lambda *_, **__: counted, PROT_READ=mmap.PROT_READ)
    monkeypatch.setattr(wasm, "mmap", fake)
    assert inspect_wasm(str(path)) is not None
    return counted.reads


def test_a_generator_is_read_once_however_many_bodies_come_before_its_constants(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The work, not the time: no byte is read twice, and of the bodies before the constants only their
    sizes are (once, five walks of the code section: a 10 MB module of empty bodies took 42.5 s to register,
    and 23 s of every start)."""
    padding = 20_000
    path = tmp_path / "padded.wasm"
    path.write_bytes(generator_wasm(12, padding=padding))
    reads = _read_counted(monkeypatch, path)
    assert max(reads) == 1
    assert sum(reads) < padding + 300  # one size a body, and the few hundred bytes that say the constants


def test_ten_megabytes_of_empty_functions_are_refused_at_their_count(tmp_path: Path) -> None:
    path = tmp_path / "crafted.wasm"
    path.write_bytes(generator_wasm(12, padding=2_500_000))  # 10 MB: wasmtime refuses it too
    with pytest.raises(ValueError) as refused:
        inspect_wasm(str(path))
    assert str(refused.value) == (
        "it declares 2,500,006 function bodies: more than the 1,000,000 read (wasmtime's limit)"
    )


def _bounded_cases() -> list[tuple[bytes, str]]:
    """Modules of one count past wasmtime's limits (and past ours of 1,000 sections)."""
    imports = generator_wasm(12, imports=(b"\x01m\x01f\x00\x00",) * 100_001)
    exports = MAGIC + section(7, vector([name(f"e{i}") + b"\x00\x00" for i in range(100_001)]))
    long_name = MAGIC + section(7, vector([name("x" * 100_001) + b"\x00\x00"]))
    sections = MAGIC + section(0, name("")) * 1_001
    return [
        (imports, "it declares 100,001 imports: more than the 100,000 read (wasmtime's limit)"),
        (exports, "it declares 100,001 exports: more than the 100,000 read (wasmtime's limit)"),
        (long_name, "a name of 100,001 bytes at byte 13: more than the 100,000 read"),
        (sections, "it has more than 1,000 sections (the most read)"),
    ]


@pytest.mark.parametrize(
    ("module", "says"), _bounded_cases(), ids=["imports", "exports", "a name", "sections"]
)
def test_a_count_past_its_bound_is_refused_naming_the_count_and_the_bound(
    tmp_path: Path, module: bytes, says: str
) -> None:
    path = tmp_path / "many.wasm"
    path.write_bytes(module)
    with pytest.raises(ValueError) as refused:
        inspect_wasm(str(path))
    assert str(refused.value) == says


def test_data_segments_past_their_bound_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "segments.wasm"
    path.write_bytes(generator_wasm(12, passive=100_000))  # and the prime's
    with pytest.raises(ValueError, match=r"^it declares 100,001 data segments: more than the 100,000 read"):
        inspect_wasm(str(path))


def test_an_unknown_import_kind_is_refused_by_the_one_reader_whoever_asks(tmp_path: Path) -> None:
    """``inspect_wasm`` once read an import of kind 7 as a global, ``wasm_field`` refused it: one reader
    now, one answer."""
    import wasmtime

    from prooflane.kinds.wasm_field import patched

    module = generator_wasm(12, imports=(b"\x01m\x01f\x07\x00",), field_product=True)
    path = tmp_path / "kind7.wasm"
    path.write_bytes(module)
    said = "not a WebAssembly module: import 0 is of kind 7, none of 0-4"
    with pytest.raises(ValueError) as refused:
        inspect_wasm(str(path))
    assert str(refused.value) == said
    assert patched(module, wasmtime.wat2wasm) == (None, f"it is not laid out as expected ({said})")


def test_every_module_cut_short_or_changed_reads_as_none_or_one_line(tmp_path: Path) -> None:
    """Every prefix of a generator, and the generator with any one byte changed: a generator, None, or one
    ValueError line (no IndexError, no traceback text)."""
    import wasmtime

    from prooflane.kinds.wasm_field import patched

    module = generator_wasm(12, padding=3, imports=(b"\x01m\x01f\x02\x00\x01",), field_product=True)
    variants = [module[:n] for n in range(8, len(module))]
    variants += [module[:n] + bytes([module[n] ^ 0xFF]) + module[n + 1 :] for n in range(8, len(module))]
    path = tmp_path / "variant.wasm"
    for variant in variants:
        path.write_bytes(variant)
        try:
            inspect_wasm(str(path))
        except ValueError as exc:
            assert "\n" not in str(exc) and str(exc), variant
        _, why = patched(variant, wasmtime.wat2wasm)
        assert "\n" not in why
