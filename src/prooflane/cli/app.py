"""The ``prooflane`` Typer application that every ``_cli_*`` module adds its commands to."""

from __future__ import annotations

import typer

from .._version import __version__

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
