"""The two arithmetics as tests take them: the C extension's (required under ``CI``: a build without it
fails the suite instead of skipping its tests) and the libraries'."""

from __future__ import annotations

import os
from types import ModuleType

import pytest

from prooflane.groth16.arithmetic import ExtensionArithmetic, LibraryArithmetic, load_extension
from prooflane.groth16.curves import Curve


def extension_module() -> ModuleType:
    """The loaded C extension; where it does not load, the test fails under ``CI`` and is skipped
    elsewhere."""
    module, why = load_extension()
    if module is None:
        message = f"the C extension is required: {why}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return module


def c_extension(curve: Curve) -> ExtensionArithmetic:
    """The C extension's arithmetic of ``curve`` (whatever this process chose)."""
    return ExtensionArithmetic(curve, extension_module())


def libraries(curve: Curve) -> LibraryArithmetic:
    """The libraries' arithmetic of ``curve``."""
    return LibraryArithmetic(curve, "chosen by the test")
