"""Fixtures of the tracker's tests."""

from __future__ import annotations

import pytest

from tests.support.tracker import Script


@pytest.fixture
def s() -> Script:
    script = Script()
    script.worker("W0")
    return script
