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
