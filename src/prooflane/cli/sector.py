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
    size: Annotated[int, typer.Option("--size", help="Sector size in bytes: a power of two, at least 64.")],
    out: Annotated[
        Path, typer.Option("--out", help="The folder to write the sector into (must not hold one).")
    ],
    seed: Annotated[
        str | None, typer.Option("--seed", help="Derive the sector's data from this text (default: random).")
    ] = None,
    sector_id: Annotated[
        int | None, typer.Option("--sector-id", help="The sector id (default: derived from the seed).")
    ] = None,
    curve: Annotated[
        list[str] | None, typer.Option("--curve", help="Also build the trees on this curve (bls12381).")
    ] = None,
) -> None:
    """Write a sector of SIZE pseudo-random bytes, its Merkle trees and meta.json; print the meta as JSON."""
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
    path: Annotated[Path, typer.Argument(help="A sector folder.")],
    curve: Annotated[str, typer.Option("--curve", help="bn128 or bls12381.")] = "bn128",
) -> None:
    """Print a sector's id, size and roots as JSON."""
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
