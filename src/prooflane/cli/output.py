"""What the command line prints, in one place: whole ids and kind names on a terminal or not, every error
on one line.

A table's cells are never cut: on a terminal the id and name columns keep their full width (the others
give way), and when the output is a pipe or a file nothing wraps or shrinks at all (rich would otherwise
lay it out for 80 columns). An error is one line on standard error, whatever its text held (newlines,
markup-like brackets), and whatever stderr is.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING

import typer

from ..errors import ProoflaneError

if TYPE_CHECKING:  # rich is imported on first use: the proving commands print errors only, and start fast
    from rich.console import Console
    from rich.table import Table

__all__ = ["console", "errors", "fit_whole", "one_line", "print_error", "table"]

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


@contextlib.contextmanager
def errors() -> Iterator[None]:
    """Print a prooflane error as one line and exit 1, never a traceback."""
    try:
        yield
    except ProoflaneError as exc:
        print_error(exc)
        raise typer.Exit(1) from None
