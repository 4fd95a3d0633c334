"""The witness helper: where it finds snarkjs, and what it says when a circuit has no generator."""

from __future__ import annotations

from pathlib import Path

import pytest

from prooflane.kinds import witness_helper
from tests.support.paths import NODE_BIN


def test_snarkjs_is_found_in_the_source_trees_node_modules(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no snarkjs on PATH, and none below the working folder
    monkeypatch.chdir(tmp_path)
    assert witness_helper._snarkjs() == str(NODE_BIN / "snarkjs")


def test_inputs_without_a_generator_are_refused_saying_so(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"no witness generator \(\.wasm\)"):
        witness_helper.generate_wtns({"a": 1}, None, str(tmp_path))
