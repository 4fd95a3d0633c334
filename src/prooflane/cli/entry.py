"""The ``prooflane`` command line's entry point. Each group of commands lives in a module of its own in this
folder; the Typer application they add to lives in :mod:`.app` (so no module imports this one back).

The proving commands (setup, export-vkey, prove, verify) are the ones timed as whole processes, so
``main`` loads only their module when one of them is asked for: the daemon's commands import an HTTP client,
rich and pydantic models, about 0.3 s of start-up that ``prooflane prove`` does not need.

A proving command also keeps Python's cycle collector off its imports and out of its exit: the modules'
objects live until the process ends, yet the collector walks them all again and again while they load
(about 70 passes, 9 ms) and once more as the interpreter shuts down (17 ms of a 0.55 s ``prooflane prove``
at 2^16). They are frozen (``gc.freeze``: kept out of every later collection) once imported and again
before the exit; the command itself runs with the collector on.
"""

from __future__ import annotations

import gc
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
        gc.disable()
        from . import proof  # noqa: F401  (only the proving commands)
        from .app import app as proof_app

        gc.freeze()
        gc.enable()
        try:
            proof_app()
        finally:
            gc.freeze()  # what is left lives until the exit: no collection walks it there
        return
    _load_all()()
