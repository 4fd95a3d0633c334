"""`prooflane fleet`: watch many daemons from one page (see docs/fleet.md)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from ..fleet.config import DEFAULT_FLEET_PORT, FleetConfig
from ..logs import LOG_FORMATS, LOG_LEVELS, configure_logging
from .app import app

FLEET_READY_PREFIX = "prooflane fleet listening on "
"""`prooflane fleet` prints this, then its URL, on standard output once it serves."""


@app.command()
def fleet(
    config: Annotated[
        Path,
        typer.Option(
            "--config", metavar="FILE", help="Fleet TOML file (created when daemons are added at run time)."
        ),
    ],
    host: Annotated[
        str | None, typer.Option("--host", metavar="ADDRESS", help="Address to bind (default 127.0.0.1).")
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(
            "--port", metavar="PORT", help=f"Port, 0 for any free one (default {DEFAULT_FLEET_PORT})."
        ),
    ] = None,
    log_format: Annotated[
        str,
        typer.Option(
            "--log-format",
            metavar="text|json",
            help="Log on standard error as text, or json (one object a line).",
        ),
    ] = "text",
    log_level: Annotated[
        str, typer.Option("--log-level", metavar="debug|info|warning|error", help="What to log.")
    ] = "info",
) -> None:
    """Follow the daemons listed in the fleet config and serve the fleet page, until SIGINT or SIGTERM."""
    from ..fleet import run_fleet
    from .output import errors

    if log_format not in LOG_FORMATS:
        raise typer.BadParameter(f"expected one of {', '.join(LOG_FORMATS)}", param_hint="--log-format")
    if log_level not in LOG_LEVELS:
        raise typer.BadParameter(f"expected one of {', '.join(LOG_LEVELS)}", param_hint="--log-level")
    configure_logging(log_level, log_format)  # httpx's line per request to every daemon left out
    with errors():
        loaded = FleetConfig.load(config, host=host, port=port)

        def ready(url: str) -> None:
            print(f"{FLEET_READY_PREFIX}{url}", flush=True)
            print(f"fleet page: {url}/ ({len(loaded.daemons)} daemons)", flush=True)

        asyncio.run(run_fleet(loaded, config, on_ready=ready))
