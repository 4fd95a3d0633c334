"""prooflane's C extension, the prover's arithmetic over a key's own bytes (see docs/groth16.md, "The C
extension"); the rest of the build is in pyproject.toml.

- On Linux x86-64 and aarch64 the extension is required: a failed compile fails the install with the
  compiler's message. Elsewhere it is optional (prooflane installs without it and proves on its libraries).
- ``PROOFLANE_NATIVE=0`` at install time skips it (the explicit opt-out, everywhere).
- ``PROOFLANE_NO_ASM=1`` at build time compiles the portable C only (``-DPROOFLANE_NO_ASM``: no inline
  assembly, ``_curvemath.asm == 0``).
- ``PROOFLANE_WERROR=1`` at build time makes warnings errors (``-Werror``): the test lanes' builds (the
  Makefile's portable and sanitiser lanes; the C core's own tests build with it too). A user's ``pip
  install`` builds without it, so that a newer compiler's new warning cannot break an install."""

import os
import platform
import sys

from setuptools import Extension, setup

CSRC = "src/prooflane/groth16/csrc"
HEADERS = (
    "cpu.h",
    "limbs.h",
    "field.h",
    "mont_x86.h",
    "inverse.h",
    "towers.h",
    "curve.h",
    "glv.h",
    "ifma.h",
    "ifma_ntt.h",
    "ifma_subgroup.h",
    "msm.h",
    "threads.h",
    "groups.h",
    "subgroup.h",
    "fr.h",
    "ntt.h",
    "synthesis.h",
    "core.h",
)
WARNINGS = ["-Wall", "-Wextra"]
WERROR_ENV = "PROOFLANE_WERROR"  # warnings as errors: the test lanes only
REQUIRED_ON = {"x86_64", "aarch64"}  # Linux machines (platform.machine()) where the build must succeed


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def _extensions() -> list[Extension]:
    if os.environ.get("PROOFLANE_NATIVE", "1").strip() == "0":
        return []
    return [
        Extension(
            "prooflane.groth16._curvemath",
            sources=[f"{CSRC}/module.c"],  # a unity build: module.c includes the core's headers
            depends=[f"{CSRC}/{name}" for name in HEADERS],
            define_macros=[("PROOFLANE_NO_ASM", "1")] if _flag("PROOFLANE_NO_ASM") else [],
            extra_compile_args=["-O3", "-pthread", *WARNINGS, *(["-Werror"] if _flag(WERROR_ENV) else [])],
            extra_link_args=["-pthread"],
            optional=not (sys.platform.startswith("linux") and platform.machine() in REQUIRED_ON),
        )
    ]


if __name__ == "__main__":  # as pip's build backend runs it; scripts/build_curvemath.py imports it
    setup(ext_modules=_extensions())
