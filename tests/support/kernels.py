"""The C extension's kernels as tests switch them (``csrc/cpu.h``: each fast kernel beside its scalar twin).

A test that asks for a kernel the CPU or the build lacks is skipped, saying which kernel, which twin and
what is missing (``-ra`` prints it in the summary), never run as its twin and passed; under
``PROOFLANE_EXPECT_IFMA=1`` (a lane on a CPU that has AVX-512 IFMA) a missing IFMA kernel fails instead."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

from prooflane.groth16.arithmetic.extension import IFMA, NO_IFMA_ENV

EXPECT_IFMA_ENV = "PROOFLANE_EXPECT_IFMA"
CURVE_NAMES = {0: "BN254", 1: "BLS12-381"}


def declared(module: ModuleType, name: str) -> dict[str, Any]:
    """Kernel ``name`` as the extension declares it (fails where it declares none)."""
    found = [k for k in module.kernels() if k["name"] == name]
    assert found, f"the extension declares no kernel {name!r}"
    return found[0]  # type: ignore[no-any-return]


def require(module: ModuleType, name: str, curve: int | None = None) -> dict[str, Any]:
    """Kernel ``name`` (on curve id ``curve``), where it can run; else skip saying why (fail, for IFMA,
    under ``PROOFLANE_EXPECT_IFMA=1``)."""
    kernel = declared(module, name)
    if curve is not None and curve not in kernel["curves"]:
        pytest.skip(f"kernel {name} has no {CURVE_NAMES[curve]} form: its twin {kernel['twin']} runs there")
    capabilities = module.capabilities()
    for need in kernel["needs"]:
        if need in capabilities["used"]:
            continue
        if need not in capabilities["detected"]:
            why = "this CPU lacks it"
        elif need not in capabilities["built"]:
            why = "this build has no assembly"
        else:
            why = f"not used in this process ({NO_IFMA_ENV})"
        message = f"kernel {name} needs {need} ({why}): not tested against its twin {kernel['twin']}"
        if need == IFMA and os.environ.get(EXPECT_IFMA_ENV, "") not in ("", "0"):
            pytest.fail(f"{EXPECT_IFMA_ENV} is set, but {message}")
        pytest.skip(message)
    return kernel


@contextlib.contextmanager
def switched(module: ModuleType, name: str, on: bool) -> Iterator[None]:
    """Kernel ``name`` on (it must be able to run: ``require``) or off, then on again."""
    if on:
        require(module, name)
    assert module.switch_kernel(name, on) == on
    try:
        yield
    finally:
        module.switch_kernel(name, True)


class Pair:
    """A kernel and its twin, to run the same call with either: ``pair.fast(f)`` and ``pair.twin(f)``."""

    def __init__(self, module: ModuleType, name: str, curve: int | None = None) -> None:
        self.module, self.name = module, name
        self.kernel = require(module, name, curve)

    def fast(self, call: Any, *args: Any) -> Any:
        with switched(self.module, self.name, True):
            return call(*args)

    def twin(self, call: Any, *args: Any) -> Any:
        with switched(self.module, self.name, False):
            return call(*args)
