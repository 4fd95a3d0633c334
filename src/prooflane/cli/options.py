"""Options several commands share: the daemon's URL and token, a workload's mix.

Every option that takes a value names its metavar (what a person types: ``URL``, ``FILE``), so that help
never shows a Python type (see :mod:`.app`).
"""

from __future__ import annotations

from typing import Annotated

import typer

from ..client import normalize_url
from ..errors import ProoflaneError
from .workload import parse_mix

__all__ = ["Mix", "OnDaemon", "OptionalUrl", "Token", "Url", "check_mix", "check_url"]


def check_url(value: str | None) -> str | None:
    """``--url`` (or $PROOFLANE_URL) as a base URL: ``host:port``, ``:port`` and ``host`` become
    ``http://...`` (see :func:`prooflane.client.normalize_url`); anything else is a usage error."""
    if value is None:
        return None
    try:
        return normalize_url(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def check_mix(value: str) -> str:
    """``--mix`` must parse (``KIND=WEIGHT,...``): a usage error otherwise, before anything starts."""
    try:
        parse_mix(value)
    except ProoflaneError as exc:
        raise typer.BadParameter(str(exc)) from None
    return value


_URL_HELP = "The daemon: http(s)://HOST:PORT, HOST:PORT, HOST or :PORT (this machine)."

Url = Annotated[
    str,
    typer.Option("--url", envvar="PROOFLANE_URL", metavar="URL", callback=check_url, help=_URL_HELP),
]
OptionalUrl = Annotated[
    str | None,
    typer.Option(
        "--url",
        envvar="PROOFLANE_URL",
        metavar="URL",
        callback=check_url,
        help=f"{_URL_HELP} Without it or $PROOFLANE_URL: a daemon of its own (tiny, in a temporary folder).",
    ),
]
Token = Annotated[
    str | None,
    typer.Option(
        "--token", envvar="PROOFLANE_TOKEN", metavar="TOKEN", help="Bearer token for mutating routes."
    ),
]
Mix = Annotated[
    str,
    typer.Option(
        "--mix",
        metavar="KIND=WEIGHT,...",
        callback=check_mix,
        help="Kinds and weights, e.g. porep-c2=2,snap-update=1.",
    ),
]
OnDaemon = Annotated[
    bool,
    typer.Option(
        "--on-daemon",
        help="FILEs are paths on the daemon's machine, inside its allowed folders (read there, not sent). "
        "Without it, FILEs are on this machine and are uploaded.",
    ),
]
