"""Commands of the `prooflane` CLI (registered on import by cli.py)."""

from __future__ import annotations

from .cli import app  # noqa: F401
