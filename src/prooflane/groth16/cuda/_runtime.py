"""Where the kernels run: a visible NVIDIA GPU, or numba's CUDA simulator on the CPU.

numba reads ``NUMBA_ENABLE_CUDASIM`` once, when ``numba.cuda`` is first imported, so the choice is made
then: with the variable set to 1 every kernel runs in the simulator (slow Python, for checking the
arithmetic at small sizes); otherwise the kernels compile for the GPU that the driver shows.
"""

from __future__ import annotations

import os
from functools import cache
from typing import Any

__all__ = ["cuda", "gpu_available", "simulated", "unavailable_reason"]


@cache
def _import() -> Any:
    try:
        from numba import cuda as module
    except ImportError as exc:  # the extra is not installed
        raise ImportError(
            f"the cuda kernels need numba-cuda: pip install 'prooflane[cuda]' ({exc})"
        ) from None
    return module


def cuda() -> Any:
    """The ``numba.cuda`` module (simulated when ``NUMBA_ENABLE_CUDASIM=1``)."""
    return _import()


def simulated() -> bool:
    """Whether the kernels run in numba's CUDA simulator."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1"


def unavailable_reason() -> str | None:
    """Why no kernel can run here (``None`` when a GPU or the simulator is there)."""
    try:
        module = cuda()
    except ImportError as exc:
        return str(exc)
    if simulated():
        return None
    try:
        if module.is_available():
            return None
    except Exception as exc:  # a broken driver install: report it, do not crash the caller
        return f"the CUDA driver failed: {exc}"
    return "no NVIDIA GPU is visible (numba.cuda.is_available() is false)"


def gpu_available() -> bool:
    """Whether a real GPU (not the simulator) runs the kernels."""
    return not simulated() and unavailable_reason() is None
