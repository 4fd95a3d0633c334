"""The ``prooflane`` command line. Each group of commands lives in its own ``_cli_*`` module; the Typer
application they add to lives in ``_cli_app`` (so no module imports this one back)."""

from __future__ import annotations

# Each module adds its commands to `app`; import order is the order of `prooflane --help`.
from . import (
    _cli_daemon,  # noqa: F401  (serve, submit, status, bench, demo, circuits)
    _cli_fleet,  # noqa: F401  (fleet)
    _cli_proof,  # noqa: F401  (setup, export-vkey, prove, verify)
    _cli_sector,  # noqa: F401  (sector new)
)
from ._cli_app import app

__all__ = ["app", "main"]


def main() -> None:
    """Entry point of the ``prooflane`` script."""
    app()
