"""Devices behind one backend interface: the engine talks to :class:`DeviceBackend` and nothing else.

Holds the interface (:mod:`.backend`), the device-section and finalizer steps every backend runs, the key
cache of a worker's process, and one module per backend: local processes (``process``, the default),
in-process (``inprocess``, for tests) and Ray actors (``ray``); :func:`backend_for` picks one from the
config. Devices are ``cpu`` or ``cuda`` (a GPU: the device section on ``groth16.cuda``'s kernels,
:mod:`.cuda`) on the process and in-process backends alike; :func:`check_devices` refuses one that cannot
work here.

May import: the leaves and ``groth16``. It knows nothing of jobs' meaning. See docs/architecture.md and
docs/engine.md ("Device backends").
"""

from .backend import (
    OWN_SYNTHESIS,
    Device,
    DeviceBackend,
    DeviceFault,
    DeviceWorker,
    Finished,
    PoolProcessDied,
    PoolReplaced,
    PoolTimedOut,
    RemoteError,
    WorkerDied,
    WorkerInfo,
)
from .choose import backend_for
from .cuda import check_devices
from .inprocess import InProcessBackend, Step
from .process import ProcessBackend
from .ray import RayBackend

__all__ = [
    "OWN_SYNTHESIS",
    "Device",
    "DeviceBackend",
    "DeviceFault",
    "DeviceWorker",
    "Finished",
    "InProcessBackend",
    "PoolProcessDied",
    "PoolReplaced",
    "PoolTimedOut",
    "ProcessBackend",
    "RayBackend",
    "RemoteError",
    "Step",
    "WorkerDied",
    "WorkerInfo",
    "backend_for",
    "check_devices",
]
