"""The ``prooflane`` command line. Each group of commands lives in its own ``_cli_*`` module."""

from __future__ import annotations

import typer

from . import __version__

app = typer.Typer(
    name="prooflane",
    help="A pipelined Groth16 proving engine.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"prooflane {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version."
    ),
) -> None:
    """A pipelined Groth16 proving engine."""


def _register_all() -> None:
    # Each module adds its commands to `app`; import order is the order of `prooflane --help`.
    from . import (
        _cli_daemon,  # noqa: F401  (serve, submit, status, bench, demo, circuits)
        _cli_fleet,  # noqa: F401  (fleet)
        _cli_proof,  # noqa: F401  (setup, export-vkey, prove, verify)
        _cli_sector,  # noqa: F401  (sector new)
    )


_register_all()


def main() -> None:
    """Entry point of the ``prooflane`` script."""
    app()
