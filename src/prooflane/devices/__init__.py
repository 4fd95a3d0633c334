"""Devices behind one backend interface: the engine talks to :class:`DeviceBackend` and nothing else.

Holds the interface (:mod:`.backend`), the device-section and finalizer steps every backend runs, the key
cache of a worker's process, and one module per backend: local processes (``process``, the default),
in-process (``inprocess``, for tests) and Ray actors (``ray``); :func:`backend_for` picks one from the
config.

May import: the leaves and ``groth16``. It knows nothing of jobs' meaning. See docs/architecture.md and
docs/engine.md ("Device backends").
"""

from .backend import (
    Device,
    DeviceBackend,
    DeviceWorker,
    Finished,
    PoolProcessDied,
    PoolReplaced,
    RemoteError,
    WorkerDied,
    WorkerInfo,
)
from .choose import backend_for
from .inprocess import InProcessBackend, Step
from .process import ProcessBackend
from .ray import RayBackend

__all__ = [
    "Device",
    "DeviceBackend",
    "DeviceWorker",
    "Finished",
    "InProcessBackend",
    "PoolProcessDied",
    "PoolReplaced",
    "ProcessBackend",
    "RayBackend",
    "RemoteError",
    "Step",
    "WorkerDied",
    "WorkerInfo",
    "backend_for",
]
