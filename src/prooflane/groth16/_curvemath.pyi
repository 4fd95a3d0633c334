"""prooflane's C extension (``groth16/csrc/module.c``): the prover's arithmetic over a key's own bytes.

Curves: 0 = BN254 (alt_bn128), 1 = BLS12-381; groups 1 (over Fq) and 2 (over Fq2). Buffers are any
C-contiguous bytes-like objects (bytes, memoryview, numpy arrays), at any alignment. Thread counts are any
int, clamped to ``[1, max_threads]``. Every function releases the GIL while it computes and returns plain
(not Montgomery) little-endian bytes; malformed arguments raise ValueError (TypeError or BufferError for a
buffer that is not bytes-like or not contiguous, OverflowError for an int beyond C's)."""

from collections.abc import Sequence
from typing import Any, TypeAlias

import numpy as np
from typing_extensions import Buffer

_Bytes: TypeAlias = Buffer | np.ndarray[Any, Any]  # numpy declares __buffer__ only from Python 3.12

asm: int
"""1 when the assembly is compiled in (x86-64 without ``PROOFLANE_NO_ASM``), else 0."""
max_threads: int
"""The most threads one call runs (64)."""

def capabilities() -> dict[str, tuple[str, ...]]:
    """The CPU's capabilities (``csrc/cpu.h``: ``"mulx"``, BMI2 and ADX; ``"avx512-ifma"``, AVX-512F and
    IFMA with their state saved by the OS), by name: ``"detected"`` (read from the CPU by cpuid), ``"built"``
    (this build has kernels for them) and ``"used"`` (the kernels may use them now)."""

def use_capabilities(names: Sequence[str], /) -> tuple[str, ...]:
    """Let the kernels use these capabilities, masked by what the CPU has and the build compiled; the
    capabilities now used. ValueError for an unknown name. Set at the first load by
    ``arithmetic.load_extension`` (all that the CPU has, less AVX-512 IFMA under ``PROOFLANE_NO_IFMA``)."""

def kernels() -> tuple[dict[str, Any], ...]:
    """The kernel set (``csrc/cpu.h``'s KERNELS), read live: each fast kernel's ``"name"``, the capabilities
    it ``"needs"``, its scalar ``"twin"``, what it ``"serves"`` (``"products"``: every operation; ``"msm"``,
    ``"ntt"`` or ``"subgroup"``), its ``"curves"`` (ids, 0 and 1) and whether it ``"runs"`` now."""

def switch_kernel(name: str, on: bool, /) -> bool:
    """Kernel ``name`` on (where its capabilities are used) or off (its twin runs): the pair tests; whether it
    runs now. ValueError for an unknown name."""

def msm(
    curve: int,
    group: int,
    rows: _Bytes,
    scalars: _Bytes,
    threads: int,
    window: int = 0,
    stride: int = 0,
    endo: bool = False,
    /,
) -> bytes:
    """Sum of ``scalars[k]·rows[k]``: rows of affine points in Montgomery form as a .zkey stores them (all
    zero: infinity), 32-byte little-endian scalars (any below 2^256), as many of each, fewer than 2^32;
    the sum's plain affine coordinates (zeros for infinity). ``window`` 2..16 fixes the window width.

    ``stride`` > 0: ``rows`` are ``fixed_table``'s tables of the scalars' points (``tables`` rows a point,
    ``rows`` = tables x scalars), made with ``shift`` = window x stride; each pass of buckets sums the
    windows ``w, w + stride, ...`` of every scalar at once (``stride`` passes in all); ValueError when a
    scalar has more than tables x stride windows (signed digits: r's bits + 2 suffice).

    ``endo``: the rows lie in the subgroup of order r (a checked key's); each scalar, reduced mod r, is
    split into two halves of 128 bits over the point and its image by the endomorphism ``(x, y) ->
    (βx, y)`` (GLV, ``csrc/glv.h``): half the windows. Off the subgroup it computes another sum, so the
    subgroup checks never use it; ValueError with ``stride``."""

def fixed_table(curve: int, group: int, rows: _Bytes, shift: int, tables: int, threads: int, /) -> bytes:
    """Fixed-base tables of ``rows`` (a key's, as ``msm`` takes them): ``tables`` rows a point, row
    ``k·tables + t`` = ``2^(shift·t)·rows[k]``, in the rows' own form (Montgomery affine, zeros for
    infinity); ``shift`` 1..4096, ``tables`` 1..256."""

def first_off_curve(curve: int, group: int, rows: _Bytes, /) -> int:
    """The index of the first row not on the curve (a coordinate not below q, or the equation fails; rows
    all zero pass), or -1."""

def first_outside_subgroup(curve: int, group: int, rows: _Bytes, threads: int, /) -> int:
    """BLS12-381 only (curve 1; other curves raise ValueError): the index of the first row outside the
    subgroup of order r by the endomorphism tests (G1: φ(P) = [-x²]P, G2: ψ(Q) = [x]Q), or -1; the rows
    must be on the curve already (``first_off_curve``); rows all zero pass."""

def coset_h(curve: int, a: _Bytes, b: _Bytes, c: _Bytes, n: int, roots: _Bytes, threads: int, /) -> bytes:
    """``a·b - c`` on the odd coset ``w_2n·<w_n>`` (n 32-byte values), from at most n values of each on
    ``<w_n>``; n a power of two up to 2^30; ``roots``: w_n, w_2n and 1/n, 32 bytes each."""

def synthesize(
    curve: int, matrix: _Bytes, rows: _Bytes, wires: _Bytes, values: _Bytes, witness: _Bytes, n_rows: int, /
) -> bytes:
    """``A·w``, ``B·w`` and their product over ``n_rows`` rows (0..2^30; 3·n_rows 32-byte values), from a
    key's terms: matrix (u32, 0 or 1), row and wire (i64) and a plain 32-byte value each; witness values
    must be below r."""

def from_montgomery(curve: int, values: _Bytes, times: int, /) -> bytes:
    """32-byte scalar-field values (any below 2^256) times ``R^-times`` mod r, ``times`` 0..4."""
