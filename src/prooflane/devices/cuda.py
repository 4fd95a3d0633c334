"""A ``cuda`` device: what a worker's prover does differently on one, and the check made before any starts.

There is no second pipeline. The process and in-process backends run the same prover and finalizer for
``cpu`` and ``cuda`` devices; a prover told that its device is ``cuda:i`` holds a :class:`CudaDevice`, which

- selects GPU ``i`` once, in the prover's process (and says what the device's memory is);
- uploads a key's G1 bases when the prover stages a partition of it (``groth16.cuda.preload``), and frees
  them when the engine's device budget evicts the key (``groth16.cuda.release``);
- runs the device section on the kernels (``groth16.cuda.prove_start``, in :func:`.steps.device_section`);
- reports what a key's bases and one device section need of the device's memory.

The finalizer (the G2 MSM, assembly, verification) runs on the CPU for every kind of device.

A CUDA error anywhere in that (the driver's or the runtime's, out of device memory included) is raised as
:class:`~.backend.DeviceFault`: the engine then replaces the worker, whose CUDA context may be lost (as after
a process death), and tries the partition again, blaming it. Nothing here imports numba until a cuda device
is used: ``groth16.cuda`` loads it on first use.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from ..config import visible_gpus
from ..errors import ConfigError
from .backend import DeviceFault

__all__ = [
    "SIMULATED_DEVICE_BYTES",
    "CudaDevice",
    "check_devices",
    "device_index",
    "device_problem",
    "is_cuda_error",
    "on_device",
]

T = TypeVar("T")

SIMULATED_DEVICE_BYTES = 16 << 30
"""The capacity of a device in numba's CUDA simulator, which has no memory of its own to report: a nominal
figure for the budget (``device_memory_bytes`` in the config sets another)."""


def device_index(name: str) -> int | None:
    """The GPU index of a ``cuda:i`` device name; None for any other kind of device."""
    kind, _, index = name.partition(":")
    return int(index or 0) if kind == "cuda" else None


def device_problem(name: str) -> str | None:
    """Why the device ``name`` cannot work on this machine; None when it can (or is no cuda device)."""
    index = device_index(name)
    if index is None:
        return None
    from ..groth16 import cuda

    if (reason := cuda.unavailable_reason()) is not None:
        return reason
    if index >= (count := visible_gpus()):
        where = "numba's CUDA simulator has" if cuda.simulated() else "this machine has"
        return f"{where} {count} device{'s' if count != 1 else ''} (cuda:0 to cuda:{count - 1})"
    return None


def check_devices(devices: Iterable[str]) -> None:
    """Raise :class:`~prooflane.errors.ConfigError` (one line) for the first device that cannot work here."""
    for name in devices:
        if (reason := device_problem(name)) is not None:
            raise ConfigError(f"device {name!r} cannot work on this machine: {reason}")


def is_cuda_error(exc: BaseException) -> bool:
    """Whether ``exc`` is an error of CUDA itself (numba's driver or runtime layer, real or simulated)."""
    return any(
        c.__module__.split(".")[0] in ("numba", "numba_cuda") and "cudadrv" in c.__module__
        for c in type(exc).__mro__
    )


def on_device(call: Callable[[], T]) -> T:
    """Run ``call``; a CUDA error it raises becomes a :class:`~.backend.DeviceFault` naming it."""
    try:
        return call()
    except Exception as exc:
        if is_cuda_error(exc):
            raise DeviceFault(f"CUDA error: {type(exc).__name__}: {exc}") from exc
        raise


class CudaDevice:
    """GPU ``index``, as one prover process uses it (made once per process, when it learns its device)."""

    def __init__(self, index: int) -> None:
        from ..groth16 import cuda

        if (reason := device_problem(f"cuda:{index}")) is not None:
            raise RuntimeError(f"device cuda:{index} cannot work here: {reason}")
        self.index = index
        on_device(lambda: cuda.select_device(index))

    def capacity(self) -> int:
        """The device's memory in bytes (:data:`SIMULATED_DEVICE_BYTES` in the simulator, which has none)."""
        from ..groth16 import cuda

        total = on_device(cuda.device_memory)[1]
        return total or SIMULATED_DEVICE_BYTES

    def need(self, key: Any) -> tuple[int, int]:
        """(bytes of ``key``'s G1 bases once resident, bytes one device section needs beside them)."""
        from ..groth16 import cuda

        return int(cuda.key_device_bytes(key)), int(cuda.partition_device_bytes(key))

    def upload(self, key: Any) -> None:
        """Make ``key``'s G1 bases resident (once; the device section then finds them)."""
        from ..groth16 import cuda

        on_device(lambda: cuda.preload(key))

    def release(self, key: Any) -> None:
        """Free ``key``'s G1 bases in the device's memory."""
        from ..groth16 import cuda

        on_device(lambda: cuda.release(key))
