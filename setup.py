"""prooflane's C extension, the prover's arithmetic over a key's own bytes (see docs/groth16.md); the rest of
the build is in pyproject.toml. Optional: where it cannot be compiled, prooflane installs without it and
proves on its libraries."""

from setuptools import Extension, setup

CSRC = "src/prooflane/groth16/csrc"

setup(
    ext_modules=[
        Extension(
            "prooflane.groth16._curvemath",
            sources=[f"{CSRC}/curvemath.c"],
            depends=[f"{CSRC}/{name}" for name in ("field.h", "inverse.h", "curve.h", "mont_x86.h")],
            extra_compile_args=["-O3", "-pthread"],
            extra_link_args=["-pthread"],
            optional=True,
        )
    ]
)
