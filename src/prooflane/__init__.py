"""prooflane: a pipelined Groth16 proving engine.

The public API: ``Client`` (talk to a daemon), ``Engine`` and ``Config`` (run the pipeline in-process),
``ProoflaneError`` (the base of every error prooflane raises); the proving core is ``prooflane.groth16`` and
the circuits are ``prooflane.circuits``. ``Client``, ``Engine`` and ``Config`` are imported on first use,
so that ``import prooflane.groth16`` (a prover's helper process, the ``prove`` command) stays light.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

# prooflane calls no BLAS (its arithmetic is integers, in C), while OpenBLAS' thread pool, which numpy starts
# when it is first imported, spins for about 0.1 s of a core per pool thread before it sleeps: 7% of a fresh
# `prooflane prove` on 2 cores, more on larger machines and in every worker process. With one thread there is
# no pool. Only where numpy is not loaded yet and OPENBLAS_NUM_THREADS is not set (docs/groth16.md, "Every
# core").
if "numpy" not in sys.modules:
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from ._version import __version__
from .errors import ProoflaneError

if TYPE_CHECKING:
    from .client import Client
    from .config import Config
    from .engine.engine import Engine

__all__ = ["Client", "Config", "Engine", "ProoflaneError", "__version__"]

_LAZY = {"Client": "client", "Config": "config", "Engine": "engine"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
