"""Fixtures of the proving core's tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from prooflane.groth16 import _pointcheck


@pytest.fixture
def memo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty memory of checked points, in this process and on disk."""
    folder = tmp_path / "point-checks"
    monkeypatch.setenv(_pointcheck.ENV, str(folder))
    monkeypatch.setattr(_pointcheck, "_KNOWN", set())
    return folder
