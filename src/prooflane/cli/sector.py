"""``prooflane sector new / info``: make a sector and its commitments, or show one.

Exit codes: 0 success, 2 bad input (one line naming the folder or file and what is wrong).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from ..errors import ProoflaneError
from .app import app
from .output import print_error

BAD_INPUT = 2

sector_app = typer.Typer(
    help="Make and inspect sectors for the built-in storage-proof kinds.", no_args_is_help=True
)
app.add_typer(sector_app, name="sector")


@sector_app.command("new")
def new_command(
    size: Annotated[
        int,
        typer.Option("--size", metavar="BYTES", help="Sector size: a power of two, at least 64 (tiny: 256)."),
    ],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            metavar="DIR",
            help="The folder to write the sector into (must not hold one). For a daemon: DATA/sectors/NAME "
            "on its machine, then `prooflane submit --sector NAME`.",
        ),
    ],
    seed: Annotated[
        str | None,
        typer.Option(
            "--seed", metavar="TEXT", help="Derive the sector's data from this text (default: random)."
        ),
    ] = None,
    sector_id: Annotated[
        int | None,
        typer.Option("--sector-id", metavar="N", help="The sector id (default: derived from the seed)."),
    ] = None,
    curve: Annotated[
        list[str] | None,
        typer.Option("--curve", metavar="bls12381", help="Also build the trees on this curve (repeatable)."),
    ] = None,
) -> None:
    """Write a sector of --size pseudo-random bytes, its Merkle trees and meta.json into --out; print the
    meta as JSON."""
    from ..circuits import Sector
    from ..groth16 import curve_by_name

    try:
        curves = [curve_by_name(name) for name in curve or []]
    except ValueError as exc:
        print_error(f"--curve: {exc}")
        raise typer.Exit(BAD_INPUT) from None
    try:
        sector = Sector.create(out, size, seed=seed, sector_id=sector_id)
        for extra in curves:
            sector.roots(extra)
    except ProoflaneError as exc:
        print_error(exc)
        raise typer.Exit(BAD_INPUT) from None
    typer.echo(json.dumps(sector.describe(), indent=2))


@sector_app.command("info")
def info_command(
    path: Annotated[Path, typer.Argument(metavar="SECTOR", hidden=True)],
    curve: Annotated[
        str, typer.Option("--curve", metavar="bn128|bls12381", help="The curve of the roots shown.")
    ] = "bn128",
) -> None:
    """Print the id, size and roots of the sector folder SECTOR as JSON."""
    from ..circuits import Sector
    from ..groth16 import curve_by_name

    try:
        chosen = curve_by_name(curve)
    except ValueError as exc:
        print_error(f"--curve: {exc}")
        raise typer.Exit(BAD_INPUT) from None
    try:
        typer.echo(json.dumps(Sector.open(path).describe(chosen), indent=2))
    except ProoflaneError as exc:
        print_error(exc)
        raise typer.Exit(BAD_INPUT) from None
