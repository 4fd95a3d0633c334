"""Fixtures of the proving core's tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from prooflane.groth16 import CURVES, _parallel, _pointcheck, prover
from prooflane.groth16._native import NATIVE_ENV, backend, native_built
from prooflane.groth16._sections import SectionCache


@pytest.fixture
def memo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty memory of checked points, in this process and on disk."""
    folder = tmp_path / "point-checks"
    monkeypatch.setenv(_pointcheck.ENV, str(folder))
    monkeypatch.setattr(_pointcheck, "_KNOWN", set())
    return folder


@pytest.fixture
def library_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Proving on the libraries alone, as where the C extension is not built: in this process (a fresh
    cache of sections) and in the helper processes it starts."""
    _parallel.shutdown()
    monkeypatch.setenv(NATIVE_ENV, "0")
    for curve in CURVES.values():
        be = backend(curve)
        monkeypatch.setattr(be, "native", False)
        monkeypatch.setattr(be, "native_msm", False)
    monkeypatch.setattr(prover, "_CACHE", SectionCache(4, "loaded in this process"))
    yield
    _parallel.shutdown()


@pytest.fixture(params=["native", "libraries"])
def arithmetic(request: pytest.FixtureRequest) -> str:
    """Each test that takes it runs twice: on the C extension (skipped where it is not built) and on the
    libraries alone."""
    if request.param == "native":
        if not native_built():
            pytest.skip("the C extension is not built")
    else:
        request.getfixturevalue("library_only")
    return str(request.param)
