"""The benchmarks' own helpers, without running a benchmark (those runs: tests/e2e/test_benchmarks.py)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _benchmark_module(name: str) -> Any:
    """A module of benchmarks/ (which is not a package), imported as the benchmarks import each other."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCHMARKS))


@pytest.mark.parametrize(
    ("text", "nice"),
    [("/autogroup-317 nice 0\n", 0), ("/autogroup-2 nice -19\n", -19), ("", None), ("garbage\n", None)],
)
def test_the_autogroup_nice_value_is_read_where_there_is_one(
    text: str, nice: int | None, tmp_path: Path
) -> None:
    _autogroup_nice = _benchmark_module("_common")._autogroup_nice
    autogroup = tmp_path / "autogroup"
    autogroup.write_text(text)
    assert _autogroup_nice(autogroup) == nice
    assert _autogroup_nice(tmp_path / "absent") is None


def test_the_rapidsnark_row_needs_an_executable_prover(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bench_prove = _benchmark_module("bench_prove")
    prover = tmp_path / "prover"
    monkeypatch.setenv("RAPIDSNARK", str(prover))
    assert bench_prove.rapidsnark_binary() is None  # absent: the row is skipped
    prover.write_text("#!/bin/sh\n")
    assert bench_prove.rapidsnark_binary() is None  # not executable
    prover.chmod(0o755)
    assert bench_prove.rapidsnark_binary() == prover
    monkeypatch.setenv("RAPIDSNARK", "")
    assert bench_prove.rapidsnark_binary() is None  # switched off
