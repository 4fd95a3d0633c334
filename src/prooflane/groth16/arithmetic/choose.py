"""The choice of each curve's arithmetic: made once per process, on first use, and said (``arithmetics``)."""

from __future__ import annotations

import os

from ..curves import BLS12381, BN128, Curve
from .base import NATIVE_ENV, Arithmetic
from .extension import ExtensionArithmetic, kernel_runs, load_extension
from .libraries import LibraryArithmetic

__all__ = ["arithmetic", "arithmetics", "products"]

_CHOSEN: dict[str, Arithmetic] = {}  # curve name -> this process's arithmetic (tests may swap entries)

SLOW_PORTABLE_BLS = (
    "this CPU lacks mulx/adx, and the C extension's portable 6-limb products are slower than "
    "py-arkworks-bls12381's MSM"
)


def _choose(curve: Curve) -> Arithmetic:
    if os.environ.get(NATIVE_ENV, "1") == "0":
        return LibraryArithmetic(curve, f"{NATIVE_ENV}=0")
    module, why = load_extension()
    if module is None:
        return LibraryArithmetic(curve, why or "the C extension is not built")
    if curve == BLS12381 and not kernel_runs(module, "mulx-products"):
        return LibraryArithmetic(curve, SLOW_PORTABLE_BLS)
    return ExtensionArithmetic(curve, module)


def arithmetic(curve: Curve) -> Arithmetic:
    """This process's arithmetic for ``curve``: the C extension where it is built and loads (on
    BLS12-381, where the CPU also has mulx/adx), else the libraries; ``PROOFLANE_NATIVE=0`` forces the
    libraries."""
    found = _CHOSEN.get(curve.name)
    if found is None:
        found = _CHOSEN[curve.name] = _choose(curve)
    return found


def arithmetics() -> dict[str, str]:
    """Which arithmetic proves each curve here: ``{"bn128": "c-extension", "bls12381": "libraries: <why>"}``
    (``/status``, ``/metrics``, health and ``prove --json`` say it)."""
    return {curve.name: arithmetic(curve).describe() for curve in (BN128, BLS12381)}


def products() -> dict[str, str]:
    """Which field products each curve's MSMs run on here: ``"avx512-ifma"`` (BN254's batches eight at a
    time), ``"mulx"`` (the assembly), ``"portable"`` (the C) or ``"libraries"`` (``/status``, the dashboard,
    ``prooflane status`` and ``prove --json`` say it)."""
    return {curve.name: arithmetic(curve).products() for curve in (BN128, BLS12381)}
