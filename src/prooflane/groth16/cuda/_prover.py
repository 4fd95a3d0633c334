"""The device section of a Groth16 proof on a CUDA GPU: H by NTT and the four G1 MSMs.

The twin of ``prover.prove_start``: the same checks, the same ``ProvingState``, so the cpu path's
``prove_finish`` (the G2 MSM and assembly, outside the device lock) completes it unchanged. Each process
keeps the G1 bases of its last few keys in device memory, keyed like the cpu path's cache of library
points by the key's digest and the section's name.
"""

from __future__ import annotations

import functools

import numpy as np
from numpy.typing import NDArray

from .._sections import SectionCache
from ..curves import Curve
from ..field import FieldVector
from ..points import G1
from ..prover import (
    DEVICE_SECTION_BASES,
    ProvingState,
    Synthesized,
    blinding,
    check_fit,
    msm_scalars,
    section_rows,
)
from ..zkey import ProvingKey
from ._msm import DeviceG1Bases, default_window, msm_kernels
from ._ntt import ntt_kernels

__all__ = [
    "coset_h",
    "key_device_bytes",
    "msm_g1",
    "partition_device_bytes",
    "preload",
    "prove_start",
    "release",
]

_CACHED_KEYS = 2  # keys whose G1 bases one process keeps in device memory

_CACHE: SectionCache[DeviceG1Bases] = SectionCache(_CACHED_KEYS, "in device memory")


def coset_h(curve: Curve, a: FieldVector, b: FieldVector, c: FieldVector, n: int) -> FieldVector:
    """``a*b - c`` on the odd coset, as ``arithmetic(curve).coset_h(a, b, c, n, threads)`` computes it."""
    return ntt_kernels(curve.r).coset_h(a, b, c, n)


def _device_bases(curve: Curve, digest: str, name: str, rows: NDArray[np.uint8] | None) -> DeviceG1Bases:
    upload = None if rows is None else functools.partial(msm_kernels(curve.q).upload, rows)
    return _CACHE.get(digest, name, upload)


def msm_g1(curve: Curve, digest: str, name: str, rows: NDArray[np.uint8] | None, scalars: FieldVector) -> G1:
    """MSM over one G1 base section, as ``prover.msm`` computes it (affine result; ``rows=None`` means
    "must be in device memory already")."""
    bases = _device_bases(curve, digest, name, rows)
    return msm_kernels(curve.q).msm(bases, scalars)


def preload(key: ProvingKey) -> None:
    """Upload ``key``'s G1 bases to this process's device now (otherwise the first proof pays for it)."""
    for name in DEVICE_SECTION_BASES:
        _device_bases(key.curve, key.digest, name, section_rows(key, name))


def release(key: ProvingKey) -> None:
    """Free ``key``'s G1 bases in this process's device memory."""
    _CACHE.release(key.digest)


def key_device_bytes(key: ProvingKey) -> int:
    """Device bytes that ``key``'s G1 bases take once uploaded (Montgomery limbs, no padding)."""
    limbs = (key.curve.q.bit_length() + 31) // 32
    rows = sum(section_rows(key, name).shape[0] for name in DEVICE_SECTION_BASES)
    return int(rows * 2 * limbs * 4)


def partition_device_bytes(key: ProvingKey) -> int:
    """Device bytes one ``prove_start`` needs beside the key's bases, at most: three NTT vectors and the
    domain's tables, and the largest MSM's workspace (digits, the sorted entries, partial sums, buckets)."""
    n, fr_limbs = key.domain_size, 8
    q_limbs = (key.curve.q.bit_length() + 31) // 32
    ntt = 3 * n * fr_limbs * 4 + (n // 2 * 2 + n) * fr_limbs * 4 + n * 4
    m = max(key.n_vars, n)
    c = default_window(m)
    windows = (256 + c - 1) // c
    point = 3 * q_limbs * 4
    msm = windows * m * 4 * 3 + (windows * m // 32 + windows * (1 << c)) * point + m * fr_limbs * 4
    return ntt + msm


def prove_start(
    key: ProvingKey, synthesized: Synthesized, *, randomness: tuple[int, int] | None = None
) -> ProvingState:
    """H by NTT and the G1 MSMs (A, B1, C, H) on the GPU; ``prover.prove_finish`` completes the proof."""
    check_fit(key, synthesized)
    h = coset_h(key.curve, synthesized.a, synthesized.b, synthesized.c, key.domain_size)
    out = {}
    for name in DEVICE_SECTION_BASES:
        scalars = msm_scalars(key, name, synthesized.witness, h)
        out[name] = msm_g1(key.curve, key.digest, name, section_rows(key, name), scalars)
    r, s = blinding(key.curve, randomness)
    return ProvingState(
        key, synthesized.witness, synthesized.public, r, s, out["a"], out["b1"], out["c"], out["h"]
    )
