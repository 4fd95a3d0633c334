"""Fixtures of the proving core's tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from prooflane.groth16 import CURVES, _pointcheck, prover
from prooflane.groth16._sections import SectionCache
from prooflane.groth16.arithmetic import NATIVE_ENV, choose
from tests.support.arithmetics import c_extension, libraries


@pytest.fixture
def memo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty memory of checked points, in this process and on disk."""
    folder = tmp_path / "point-checks"
    monkeypatch.setenv(_pointcheck.ENV, str(folder))
    monkeypatch.setattr(_pointcheck, "_KNOWN", set())
    return folder


def _use(monkeypatch: pytest.MonkeyPatch, make: object) -> None:
    for curve in CURVES.values():
        monkeypatch.setitem(choose._CHOSEN, curve.name, make(curve))  # type: ignore[operator]
    monkeypatch.setattr(prover, "_CACHE", SectionCache(4, "loaded in this process"))


@pytest.fixture
def library_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Proving on the libraries alone, as where the C extension is not built: in this process (a fresh
    cache of sections) and in the processes it starts."""
    monkeypatch.setenv(NATIVE_ENV, "0")
    _use(monkeypatch, libraries)


@pytest.fixture
def native(monkeypatch: pytest.MonkeyPatch) -> None:
    """Proving on the C extension (where it is not built the test fails under CI and is skipped
    elsewhere), with a fresh cache of sections."""
    _use(monkeypatch, c_extension)


@pytest.fixture(params=["native", "libraries"])
def arithmetic(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test that takes it runs twice: on the C extension, on both curves (where it is not built the
    test fails under CI and is skipped elsewhere), and on the libraries alone."""
    if request.param == "native":
        _use(monkeypatch, c_extension)
    else:
        request.getfixturevalue("library_only")
    return str(request.param)
