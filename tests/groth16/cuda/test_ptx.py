"""Every cuda kernel compiles for the real CUDA target (sm_90) without a GPU: numba types it as it would
for a device (unlike the simulator, which runs it as Python) and NVVM turns it into PTX, with no
floating-point instruction anywhere (a mix of signed and unsigned 64-bit integers would have made one).
BN254 here (the BLS12-381 kernels are the same code with other constants: ``cuda_ptx.py --all``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("numba.cuda", reason="numba-cuda is not installed: pip install 'prooflane[cuda]'")

from tests.support.cuda_ptx import MSM, NTT

SCRIPT = Path(__file__).resolve().parents[2] / "support" / "cuda_ptx.py"


@pytest.mark.timeout(900)
def test_every_kernel_compiles_to_ptx_without_floating_point() -> None:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = os.pathsep.join([str(SCRIPT.parent), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=600)
    if "NVVM" in done.stderr and done.returncode:
        pytest.skip(f"NVVM (the CUDA compiler library) is not installed: {done.stderr.splitlines()[-1]}")
    assert done.returncode == 0, done.stderr[-3000:]
    compiled = [line.split() for line in done.stdout.splitlines()]
    assert {(curve, name) for curve, name, _, _ in compiled} == {
        (curve, name) for curve in ("bn128",) for name in (*MSM, *NTT)
    }
    assert all(int(size) > 1000 and int(f64) == 0 for _, _, size, f64 in compiled), compiled
