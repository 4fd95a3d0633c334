"""The device section of Groth16 (H by NTT, the G1 MSMs) as CUDA kernels written with numba-cuda.

An optional extra (``pip install 'prooflane[cuda]'``). This package imports without it: ``unavailable_reason``
says why nothing can run, and the primitives import numba on first use. With ``NUMBA_ENABLE_CUDASIM=1`` the
kernels run in numba's CUDA simulator on the CPU (slowly: for checking the arithmetic at small sizes).

The primitives mirror the cpu path's, so a ``cuda`` device backend swaps them in inside its device section:

- ``coset_h(curve, a, b, c, n)`` for ``arithmetic(curve).coset_h(a, b, c, n, threads)``;
- ``msm_g1(curve, digest, name, rows, scalars)`` for ``prover._msm(...)`` (the result affine);
- ``prove_start(key, synthesized)`` for ``prover.prove_start``; ``prover.prove_finish`` completes it;
- ``ntt(curve, values, inverse=False)``: the plain transform at snarkjs' roots of unity;
- ``preload``/``release`` a key's bases in device memory; ``key_device_bytes`` and
  ``partition_device_bytes`` for a device's memory budget; ``device_memory()`` for what the device has.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._runtime import gpu_available, simulated, unavailable_reason

if TYPE_CHECKING:
    from ..curves import Curve
    from ..field import FieldVector

__all__ = [
    "coset_h",
    "device_memory",
    "gpu_available",
    "key_device_bytes",
    "msm_g1",
    "ntt",
    "partition_device_bytes",
    "preload",
    "prove_start",
    "release",
    "select_device",
    "simulated",
    "unavailable_reason",
]

_LAZY = {
    "coset_h": "_prover",
    "key_device_bytes": "_prover",
    "msm_g1": "_prover",
    "partition_device_bytes": "_prover",
    "preload": "_prover",
    "prove_start": "_prover",
    "release": "_prover",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"{__name__}.{module}"), name)


def _numba_cuda() -> Any:
    from numba import cuda

    return cuda


def ntt(curve: Curve, values: FieldVector, *, inverse: bool = False) -> FieldVector:
    """Evaluations of the polynomial with coefficients ``values`` at snarkjs' ``w_n^j`` (``n`` the length,
    a power of two); with ``inverse``, coefficients from evaluations."""
    from ._ntt import ntt_kernels

    return ntt_kernels(curve.r).ntt(values, inverse=inverse)


def select_device(index: int) -> None:
    """Make GPU ``index`` this thread's device (a worker process calls it once, before any kernel)."""
    cuda: Any = _numba_cuda()
    cuda.select_device(index)


def device_memory() -> tuple[int, int]:
    """(free, total) bytes of the current device's memory; (0, 0) in the simulator, which has none."""
    if simulated():
        return 0, 0
    cuda: Any = _numba_cuda()
    free, total = cuda.current_context().get_memory_info()
    return int(free), int(total)
