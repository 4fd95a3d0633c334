"""Compile every cuda kernel to PTX for the real CUDA target, without a GPU (run as a script).

numba types and lowers the kernels exactly as for a GPU and NVVM emits PTX; only the device's compute
capability, which numba asks the driver for, is supplied by hand. Prints one line per kernel:
``name bytes f64-instructions``.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from prooflane.groth16.curves import BLS12381, BN128

CC = (9, 0)  # the H100/H200 generation
P3, P2, P1 = "uint32[:,:,:]", "uint32[:,:]", "uint32[:]"
MSM = {
    "to_montgomery": f"void({P3})",
    "digits": f"void({P2}, int64, int32[:,:])",
    "count": "void(int32[:,:], int64, int32[:])",
    "scatter": "void(int32[:,:], int64, int32[:], int32[:])",
    "accumulate": f"void({P3}, int32[:], int64[:], int64[:], {P3})",
    "sum_runs": f"void({P3}, int64[:], int64[:], {P3})",
    "place": f"void({P3}, int64[:], {P3})",
    "reduce_buckets": f"void({P3}, int64, int64, {P3})",
    "combine": f"void({P3}, int64, {P3})",
}
NTT = {
    "_scale": f"void({P2}, {P1})",
    "_powers": f"void({P1}, {P1}, {P2})",
    "_permute": f"void({P2}, int32[:], {P2})",
    "_butterflies": f"void({P2}, int64, int64, {P2})",
    "_multiply": f"void({P2}, {P2})",
    "_quotient": f"void({P2}, {P2}, {P2})",
}


def main() -> None:
    import numba.cuda.dispatcher as dispatcher
    from numba import cuda as numba_cuda

    from prooflane.groth16.cuda._msm import msm_kernels
    from prooflane.groth16.cuda._ntt import ntt_kernels

    dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=CC)  # type: ignore[attr-defined]
    cuda: Any = numba_cuda
    curves = [BN128, BLS12381] if "--all" in sys.argv else [BN128]
    for curve in curves:
        for owner, table in ((msm_kernels(curve.q), MSM), (ntt_kernels(curve.r), NTT)):
            for name, signature in table.items():
                ptx, _ = cuda.compile_ptx(getattr(owner, name).py_func, signature, cc=CC)
                print(curve.name, name, len(ptx), ptx.count(".f64"), flush=True)


if __name__ == "__main__":
    main()
