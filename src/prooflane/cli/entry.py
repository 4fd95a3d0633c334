"""The ``prooflane`` command line's entry point. Each group of commands lives in a module of its own in this
folder; the Typer application they add to lives in :mod:`.app` (so no module imports this one back).

The proving commands (setup, export-vkey, prove, verify) are the ones timed as whole processes, so
``main`` loads only their module when one of them is asked for: the daemon's commands import an HTTP client,
rich and pydantic models, about 0.3 s of start-up that ``prooflane prove`` does not need.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import typer

    app: typer.Typer

__all__ = ["app", "main"]

PROOF_COMMANDS = frozenset({"setup", "export-vkey", "prove", "verify"})


def _load_all() -> typer.Typer:
    """Every command group; import order is the order of `prooflane --help`."""
    from . import (
        daemon,  # noqa: F401  (serve, status, bench, demo)
        jobs,  # noqa: F401  (submit, circuits)
    )

    # isort: split
    from . import (
        fleet,  # noqa: F401  (fleet, fleet deploy, stop, restart, logs)
        proof,  # noqa: F401  (setup, export-vkey, prove, verify)
        sector,  # noqa: F401  (sector new)
        service,  # noqa: F401  (service start, stop, restart, status)
    )
    from .app import app

    return app


def __getattr__(name: str) -> Any:
    if name == "app":
        return _load_all()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """Entry point of the ``prooflane`` script."""
    if len(sys.argv) > 1 and sys.argv[1] in PROOF_COMMANDS:
        from . import proof  # noqa: F401  (only the proving commands)
        from .app import app as proof_app

        proof_app()
        return
    _load_all()()
