"""Test tooling, public: fault injection into a running daemon's processes and the chaos run.

Holds the fault injector (which processes of a daemon to kill, when), the sampler that reads ``/healthz``
and ``/status`` while faults land, and the chaos run (a workload through a daemon under faults, with every
property checked afterwards). Used by ``benchmarks/chaos.py`` and the test suite.

May import every part (it drives a daemon from outside); nothing of prooflane imports it. See
docs/architecture.md.
"""

from .chaos import DEFAULT_KINDS, ChaosReport, ChaosRun, ChaosSettings
from .faults import Fault, FaultInjector, ProcessKind, Sampler

__all__ = [
    "DEFAULT_KINDS",
    "ChaosReport",
    "ChaosRun",
    "ChaosSettings",
    "Fault",
    "FaultInjector",
    "ProcessKind",
    "Sampler",
]
