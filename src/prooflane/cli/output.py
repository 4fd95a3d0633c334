"""What the command line prints, in one place: whole ids and kind names on a terminal or not, every error
on one line (exit 2 for a wrong usage, 1 for a refused request).

A table's cells are never cut: on a terminal the id and name columns keep their full width (the others
give way), and when the output is a pipe or a file nothing wraps or shrinks at all (rich would otherwise
lay it out for 80 columns). An error is one line on standard error, whatever its text held (newlines,
markup-like brackets), and whatever stderr is.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Mapping
from typing import IO, TYPE_CHECKING, Any, NoReturn

import typer

from ..errors import ProoflaneError

if TYPE_CHECKING:  # rich is imported on first use: the proving commands print errors only, and start fast
    from rich.console import Console
    from rich.table import Table

__all__ = [
    "REFUSED",
    "USAGE",
    "console",
    "errors",
    "fit_whole",
    "invalid_request",
    "one_line",
    "print_error",
    "table",
    "usage_error",
]

USAGE = 2
"""The exit status of a wrong usage: an option missing, unknown, or given a value it does not take."""
REFUSED = 1
"""The exit status of a request the daemon refused, or could not be sent (no daemon at the URL)."""

_SHOWN_INPUT = 80  # a refused value up to this long is repeated in the error line
_UNBOUNDED = 1 << 16  # the width of a pipe or file: lines are as long as their content


def console(*, stderr: bool = False) -> Console:
    """A console on stdout (or stderr) that never hard-wraps: a terminal's width where there is one, else
    unbounded."""
    from rich.console import Console

    stream: IO[str] = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else _UNBOUNDED
    return Console(file=stream, width=width, soft_wrap=True, highlight=False)


def table(*columns: str, title: str | None = None, whole: tuple[str, ...] = ()) -> Table:
    """A table whose ``whole`` columns (ids, kind names) are never wrapped or cut, on any width."""
    from rich.table import Table

    made = Table(title=title)
    for name in columns:
        if name in whole:
            made.add_column(name, no_wrap=True, overflow="ignore")
        else:
            made.add_column(name, overflow="fold")
    return made


def fit_whole(made: Table, whole: tuple[str, ...]) -> None:
    """Give each ``whole`` column the width of its longest cell, so a narrow terminal shrinks the others."""
    for column in made.columns:
        if column.header in whole:
            cells = [str(c) for c in column.cells]
            column.min_width = max([len(str(column.header)), *map(len, cells)])


def one_line(text: str) -> str:
    """``text`` on one line: its lines joined with " | ", blank ones dropped, runs of spaces kept."""
    return " | ".join(line.strip() for line in text.splitlines() if line.strip())


def print_error(message: object) -> None:
    """``error: <message>`` on one line of standard error."""
    typer.echo(f"error: {one_line(str(message))}", err=True)


def usage_error(message: object) -> NoReturn:
    """Print ``message`` as one error line and exit 2 (a wrong usage)."""
    print_error(message)
    raise typer.Exit(USAGE)


@contextlib.contextmanager
def errors(options: Mapping[str, str] | None = None) -> Iterator[None]:
    """Print a prooflane error as one line and exit 1, never a traceback.

    ``options`` maps the fields of a request model (:mod:`prooflane.models`) to the options that set them:
    a request the model refuses while the command builds it is then one line naming the option, exit 2.
    """
    try:
        yield
    except ProoflaneError as exc:
        print_error(exc)
        raise typer.Exit(REFUSED) from None
    except ValueError as exc:  # pydantic's ValidationError is one (pydantic is imported only if it is)
        if options is None:
            raise
        from pydantic import ValidationError

        if not isinstance(exc, ValidationError):
            raise
        usage_error(invalid_request(exc.errors(), options))


def invalid_request(problems: list[Any], options: Mapping[str, str]) -> str:
    """pydantic's problems with a request, as options: ``--job-id: expected 1-64 characters ...``."""
    lines = []
    for problem in problems:
        field = str(problem["loc"][0]) if problem.get("loc") else ""
        text = str(problem["msg"]).removeprefix("Value error, ").removeprefix(f"{field}: ")
        text = text.replace("Input should be", "expected", 1)
        given = problem.get("input")
        if field and isinstance(given, str) and len(given) <= _SHOWN_INPUT:
            text = f"{text}, not {given!r}"
        lines.append(f"{options.get(field, field)}: {text}" if field else text)
    return "; ".join(lines)
