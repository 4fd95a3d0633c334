"""The ``prooflane`` Typer application that every command module adds its commands to, and how it fails.

A usage error (a missing or unknown option, a value the option does not take) is one line on standard
error and exit 2, never click's usage block nor a traceback (:class:`_Prooflane`); a refused request is one
line and exit 1 (:func:`.output.errors`).

Help uses click's plain layout, with a metavar on every option that takes a value (``--sector NAME|DIR``,
``--witness FILE``): typer 0.26 and later, which carry their own copy of click, show a Python type where
an option names no metavar (``<str>``, ``<list[str]>``), and their rich help also puts ``<bool>`` after every
flag, ``--help`` included. The plain layout shows a flag bare.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import typer
from typer.core import TyperGroup

from .._version import __version__
from .output import USAGE, print_error

try:  # typer 0.26 and later carry their own copy of click, whose exceptions they raise
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover  (an older typer, on the click package)
    from click import exceptions as click_errors  # type: ignore[no-redef]

__all__ = ["app"]


class _Prooflane(TyperGroup):
    """The root command: runs the command asked for and turns click's errors into one line each."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        except click_errors.UsageError as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # `prooflane` or a group alone: its help
                exc.show()
                sys.exit(exc.exit_code)
            print_error(usage_line(exc))
            sys.exit(USAGE)
        except click_errors.ClickException as exc:
            print_error(exc.format_message())
            sys.exit(exc.exit_code)
        except typer.Abort:
            print_error("aborted")
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


def usage_line(exc: click_errors.UsageError) -> str:
    """Click's message, and where the command's help is: ``Missing option '--kind' (see 'prooflane
    submit --help')``."""
    message = exc.format_message().strip().rstrip(".")
    return f"{message} (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else message


app = typer.Typer(
    name="prooflane",
    help="A pipelined Groth16 proving engine.",
    cls=_Prooflane,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
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
