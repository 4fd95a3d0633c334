"""The processes a worker and the synthesis pool are made of, by the name each gives itself.

Every process names itself (``/proc/self/comm``, at most 15 characters), so ``ps``, ``top``, the benchmarks
and the fault injector can tell them apart. This is the one list of those names.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Role"]


class Role(StrEnum):
    """A child process's role, its value the name it shows."""

    PROVER = "prooflane-prove"  # a worker's device section: stage, then prove_start under the device lock
    FINALIZER = "prooflane-final"  # a worker's finalizer: the G2 MSM, prove_finish, verification
    SYNTHESIS = "prooflane-synth"  # a process of the CPU-side pool: synthesis, key preparation
    TABLES = "prooflane-tables"  # a key's fixed-base tables built in the background (msm_tables = "auto")
