"""The engine: the pipeline's parts under one asyncio task group.

Holds the engine (lifecycle and public methods), the shared pipeline state and its outcomes, admission,
the circuit registry, the dispatcher, the device loop and the engine's own job records. It raises
refusals (:mod:`prooflane.errors`), never HTTP codes.

May import: the leaves, ``groth16``, ``circuits``, ``devices`` and ``status``. Nothing above it (``server``,
``fleet``, ``cli``, ``testing``). See docs/architecture.md.
"""

from .engine import Engine

__all__ = ["Engine"]
