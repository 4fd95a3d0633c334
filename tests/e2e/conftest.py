"""Fixtures shared by the end-to-end tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser

from tests.support.browser import chromium


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Chromium, one per test module."""
    with chromium() as launched:
        yield launched
