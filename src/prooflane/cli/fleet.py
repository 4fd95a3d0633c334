"""`prooflane fleet`: watch many daemons from one page (see docs/fleet.md)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Annotated

import typer

from ..fleet.config import DEFAULT_FLEET_PORT, FleetConfig
from .app import app

FLEET_READY_PREFIX = "prooflane fleet listening on "
"""`prooflane fleet` prints this, then its URL, on standard output once it serves."""


@app.command()
def fleet(
    config: Annotated[
        Path, typer.Option("--config", help="Fleet TOML file (created when daemons are added at run time).")
    ],
    host: Annotated[str | None, typer.Option("--host", help="Address to bind (default 127.0.0.1).")] = None,
    port: Annotated[
        int | None, typer.Option("--port", help=f"Port, 0 for any free one (default {DEFAULT_FLEET_PORT}).")
    ] = None,
) -> None:
    """Follow the daemons listed in the fleet config and serve the fleet page, until SIGINT or SIGTERM."""
    from ..fleet import run_fleet
    from .output import errors

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not one line per request to every daemon
    with errors():
        loaded = FleetConfig.load(config, host=host, port=port)

        def ready(url: str) -> None:
            print(f"{FLEET_READY_PREFIX}{url}", flush=True)
            print(f"fleet page: {url}/ ({len(loaded.daemons)} daemons)", flush=True)

        asyncio.run(run_fleet(loaded, config, on_ready=ready))
