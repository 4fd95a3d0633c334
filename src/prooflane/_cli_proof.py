"""``prooflane setup / export-vkey / prove / verify``: the Groth16 core from the command line."""

from __future__ import annotations

from .cli import app  # noqa: F401
