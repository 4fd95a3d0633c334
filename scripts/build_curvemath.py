"""Build the C extension ``_curvemath`` into a folder of its own, never over the installed one, with the
Extension that setup.py defines (its sources, headers and flags) and setuptools' own build_ext, as pip
would: the test lanes of docs/groth16.md load such a build through ``PROOFLANE_CURVEMATH_SO``.

    python scripts/build_curvemath.py OUT            prints the path of OUT/.../_curvemath*.so

setup.py's environment applies (``PROOFLANE_NO_ASM=1``: the portable C), and so do the compiler's
(``CFLAGS``, ``LDFLAGS``: the sanitiser lane's ``-fsanitize=...``)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from setuptools import Distribution
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent.parent


def _extensions() -> list[object]:
    spec = importlib.util.spec_from_file_location("prooflane_setup", ROOT / "setup.py")
    assert spec is not None and spec.loader is not None
    setup = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(setup)  # defines the Extension; setup() runs only as __main__
    extensions: list[object] = setup._extensions()
    return extensions


def build(out: Path) -> Path:
    extensions = _extensions()
    if not extensions:
        sys.exit("PROOFLANE_NATIVE=0: nothing to build")
    dist = Distribution({"name": "prooflane", "ext_modules": extensions})
    command = build_ext(dist)
    command.build_lib = str(out)
    command.build_temp = str(out / "tmp")
    command.force = True  # the flags may have changed where the sources did not
    command.ensure_finalized()
    command.run()
    (built,) = command.get_outputs()
    return Path(built)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    print(build(Path(sys.argv[1]).resolve()))
