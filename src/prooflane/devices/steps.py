"""The device section and the finalizer's steps, as every backend runs them (in its own processes,
actors or the daemon itself): one body each, so every backend proves the same way.

- :func:`device_section`: ``prove_start`` (H by NTT, the G1 MSMs) on a staged partition, timed, and the
  proving state without its key (the finalizer holds its own copy of the key; a state with its key would
  carry the key's arrays across every process boundary). On a ``cuda`` device it is
  ``groth16.cuda.prove_start``, the same section on the GPU kernels (a CUDA error raised as
  :class:`~.backend.DeviceFault`).
- :func:`early_b2`: the G2 MSM alone, which needs only the witness: a finalizer computes it during the
  device section, so finishing afterwards is only assembly and verification.
- :func:`finalize`: ``prove_finish`` and verification, timed, as a :class:`~.backend.Finished`.

Which base sections each side loads (``DEVICE_SECTION_BASES``, ``FINALIZE_BASES``) is the prover's own
rule (:mod:`prooflane.groth16.prover`).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from ..groth16.prover import DEVICE_SECTION_BASES, FINALIZE_BASES
from .backend import Finished
from .cuda import on_device

__all__ = ["DEVICE_SECTION_BASES", "FINALIZE_BASES", "device_section", "early_b2", "finalize"]


def device_section(key: Any, synthesized: Any, kind: str = "cpu") -> tuple[dict[str, Any], float]:
    """``prove_start`` on ``synthesized`` on a device of ``kind``: the proving state's fields without its key,
    and milliseconds."""
    from ..groth16 import prove_start

    started = time.perf_counter()
    if kind == "cuda":
        from ..groth16 import cuda

        state = on_device(lambda: cuda.prove_start(key, synthesized))
    else:
        state = prove_start(key, synthesized)
    ms = (time.perf_counter() - started) * 1000
    return {f.name: getattr(state, f.name) for f in dataclasses.fields(state) if f.name != "key"}, ms


def early_b2(key: Any, witness: Any) -> Any:
    """The partition's G2 MSM, computed ahead of its :func:`finalize` (during its device section)."""
    from ..groth16 import prove_b2

    return prove_b2(key, witness)


def finalize(key: Any, fields: dict[str, Any], b2: Any = None) -> Finished:
    """``prove_finish`` on the device section's ``fields`` (with the G2 MSM ``b2`` when computed early for
    this very witness), then verification of the proof against the key's verification key."""
    from ..groth16 import ProvingState, prove_finish, verify

    started = time.perf_counter()
    proof = prove_finish(ProvingState(key=key, **fields), b2=b2)
    verified = bool(verify(key.verification_key, proof.public, proof))
    ms = (time.perf_counter() - started) * 1000
    return Finished(proof.to_json(), proof.public_json(), verified, ms)
