"""The G1 multi-scalar multiplication by Pippenger's bucket method, as numba CUDA kernels.

With windows of ``c`` bits, scalar ``k_i`` has digits ``d_iw`` (``k_i = sum_w d_iw 2^(c w)``), and
``sum_i k_i P_i = sum_w 2^(c w) sum_b b B_wb`` where bucket ``B_wb`` is the sum of the bases whose digit in
window ``w`` is ``b``. On the device:

1. digits: one thread per scalar cuts it into ``W`` windows;
2. counting sort: each (window, digit) pair counts its entries (atomics), the host takes the prefix sums,
   each entry is scattered to its bucket's range, so every bucket is one contiguous run of base indices;
3. bucket accumulation: one thread per run of at most ``segment`` entries of a bucket adds its affine bases
   (mixed additions); runs of one bucket are then summed, ``segment`` at a time, until one point per
   bucket is left, so a bucket holding many bases (a witness full of ones) never serializes on one thread;
4. bucket reduction: one thread per slice of a window's buckets computes ``sum_b b B_b`` over its slice by
   running sums and adds ``(lo - 1) * sum_b B_b`` for its offset; the slices of a window are then summed;
5. window combination: one thread takes ``sum_w 2^(c w) T_w`` by Horner's rule (``c`` doublings a window).

The host converts: bases from the key's plain little-endian rows to Montgomery limbs (on the device), the
scalars from a ``FieldVector`` (canonical, as the prover holds them), the result to an affine ``G1``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import cuda as _cuda
from numpy.typing import NDArray

from ..field import FieldVector
from ._curve import G1Ops, g1_ops
from ._field import to_limbs
from ._runtime import simulated

cuda: Any = _cuda  # numba's types do not describe its kernel API; the simulator swaps this name

__all__ = ["DeviceG1Bases", "MsmKernels", "default_slices", "default_window", "msm_kernels"]

THREADS = 128  # threads per block
SEGMENT = 32  # entries one thread adds before its partial sum is handed on
MAX_SLICES = 1024  # threads per window in the bucket reduction, at most


def default_window(n: int) -> int:
    """Window bits for ``n`` bases: about ``log2(n) - 4`` (fewer windows, more buckets, as n grows)."""
    return max(4, min(16, n.bit_length() - 4))


def default_slices(window: int) -> int:
    """Threads per window in the bucket reduction: each takes at least ``2 c`` buckets, so its offset
    multiplication (about ``1.5 c`` point operations) stays small beside its ``2 (2 c)`` additions."""
    return max(1, min(MAX_SLICES, ((1 << window) - 1) // (2 * window)))


def _grid(n: int) -> tuple[int, int]:
    """(blocks, threads per block) covering ``n`` threads; small launches get small blocks."""
    # The simulator runs each thread of a block as a Python thread that polls the others: one a block.
    threads = 1 if simulated() else min(THREADS, max(1, n))
    return max(1, (n + threads - 1) // threads), threads


@dataclass(frozen=True, eq=False)
class DeviceG1Bases:
    """A key section's G1 bases in device memory, Montgomery form, rows at infinity left out.

    ``index[j]`` is the row of the key's section that ``points[j]`` came from: scalars are picked with it.
    """

    q: int
    index: NDArray[np.int64]
    points: Any  # device array (m, 2, L) of uint32

    @property
    def nbytes(self) -> int:
        """Device bytes held."""
        return int(self.points.nbytes)


class MsmKernels:
    """The MSM kernels of one curve, compiled on first launch."""

    def __init__(self, ops: G1Ops) -> None:
        self.ops = ops
        self.limbs = ops.fq.limbs
        self._build()

    def _build(self) -> None:
        ops, fq = self.ops, self.ops.fq
        fmul = fq.mul
        r2 = to_limbs([fq.r2], fq.limbs)[0]  # x * R^2 / R = x R: the Montgomery form of x
        add, add_affine, copy, set_inf = ops.add, ops.add_affine, ops.copy, ops.set_infinity
        double, mul_small = ops.double, ops.mul_small
        L = self.limbs

        @cuda.jit
        def to_montgomery(points: Any) -> None:
            i = cuda.grid(1)
            if i < points.shape[0]:
                fmul(points[i, 0], points[i, 0], r2)
                fmul(points[i, 1], points[i, 1], r2)

        @cuda.jit
        def digits(scalars: Any, c: Any, out: Any) -> None:
            i = cuda.grid(1)
            if i < scalars.shape[0]:
                limbs = scalars.shape[1]
                mask = (np.uint64(1) << np.uint64(c)) - np.uint64(1)
                for w in range(out.shape[0]):
                    bit = w * c
                    k = bit // 32
                    v = np.uint64(scalars[i, k])
                    if k + 1 < limbs:
                        v |= np.uint64(scalars[i, k + 1]) << np.uint64(32)
                    out[w, i] = np.int32((v >> np.uint64(bit % 32)) & mask)

        @cuda.jit
        def count(digit: Any, buckets: Any, counts: Any) -> None:
            i = cuda.grid(1)
            n = digit.shape[1]
            if i < digit.shape[0] * n:
                w = i // n
                d = digit[w, i % n]
                if d != 0:
                    cuda.atomic.add(counts, w * buckets + d, 1)

        @cuda.jit
        def scatter(digit: Any, buckets: Any, cursor: Any, order: Any) -> None:
            i = cuda.grid(1)
            n = digit.shape[1]
            if i < digit.shape[0] * n:
                w = i // n
                d = digit[w, i % n]
                if d != 0:
                    order[cuda.atomic.add(cursor, w * buckets + d, 1)] = i % n

        @cuda.jit
        def accumulate(bases: Any, order: Any, start: Any, stop: Any, out: Any) -> None:
            s = cuda.grid(1)
            if s < out.shape[0]:
                acc = cuda.local.array((3, L), np.uint32)
                set_inf(acc)
                for e in range(start[s], stop[s]):
                    add_affine(acc, acc, bases[order[e]])
                copy(out[s], acc)

        @cuda.jit
        def sum_runs(points: Any, start: Any, stop: Any, out: Any) -> None:
            s = cuda.grid(1)
            if s < out.shape[0]:
                acc = cuda.local.array((3, L), np.uint32)
                set_inf(acc)
                for e in range(start[s], stop[s]):
                    add(acc, acc, points[e])
                copy(out[s], acc)

        @cuda.jit
        def place(points: Any, keys: Any, buckets: Any) -> None:
            s = cuda.grid(1)
            if s < keys.shape[0]:
                copy(buckets[keys[s]], points[s])

        @cuda.jit
        def reduce_buckets(buckets: Any, per_window: Any, slices: Any, out: Any) -> None:
            t = cuda.grid(1)
            if t < out.shape[0]:
                w = t // slices
                width = (per_window - 1 + slices - 1) // slices  # buckets 1 .. per_window - 1
                lo = 1 + (t % slices) * width
                hi = min(lo + width, per_window)
                running = cuda.local.array((3, L), np.uint32)
                acc = cuda.local.array((3, L), np.uint32)
                set_inf(running)
                set_inf(acc)
                b = hi - 1
                while b >= lo:
                    add(running, running, buckets[w * per_window + b])
                    add(acc, acc, running)
                    b -= 1
                # acc = sum (b - lo + 1) B_b; the slice owes (lo - 1) sum B_b more
                mul_small(running, running, lo - 1)
                add(out[t], acc, running)

        @cuda.jit
        def combine(windows: Any, c: Any, out: Any) -> None:
            if cuda.grid(1) == 0:
                acc = cuda.local.array((3, L), np.uint32)
                set_inf(acc)
                w = windows.shape[0] - 1
                while w >= 0:
                    for _ in range(c):
                        double(acc, acc)
                    add(acc, acc, windows[w])
                    w -= 1
                copy(out[0], acc)

        self.to_montgomery, self.digits, self.count, self.scatter = to_montgomery, digits, count, scatter
        self.accumulate, self.sum_runs, self.place = accumulate, sum_runs, place
        self.reduce_buckets, self.combine = reduce_buckets, combine

    # -- host ---------------------------------------------------------------------------------------------

    def upload(self, rows: NDArray[np.uint8]) -> DeviceG1Bases:
        """Bases from rows of Montgomery-form little-endian affine coordinates (``2 * n8q`` bytes each, all
        zero for the point at infinity), as a key holds them: the .zkey's own form, whose Montgomery radix
        (2^(8 * n8q)) is the kernels' (2^(32 * limbs)), so the limbs are used as they are."""
        index = np.flatnonzero(rows.any(axis=1)).astype(np.int64)
        limbs = np.ascontiguousarray(rows[index]).view("<u4").astype(np.uint32)
        limbs = limbs[:, : 2 * self.limbs].reshape(-1, 2, self.limbs)  # drop each coordinate's padding
        points = cuda.to_device(np.ascontiguousarray(limbs))
        return DeviceG1Bases(self.ops.fq.p, index, points)

    def msm(
        self,
        bases: DeviceG1Bases,
        scalars: FieldVector,
        *,
        window: int | None = None,
        segment: int = SEGMENT,
        slices: int | None = None,
    ) -> tuple[int, int]:
        """``sum_i scalars[i] * base_i`` over the key section's rows (canonical scalars, one per row)."""
        picked = np.ascontiguousarray(scalars[bases.index], dtype="<u8").view("<u4").astype(np.uint32)
        n = picked.shape[0]
        if n == 0:
            return (0, 0)
        c = window or default_window(n)
        per_window = 1 << c
        windows = (picked.shape[1] * 32 + c - 1) // c
        digit = cuda.device_array((windows, n), dtype=np.int32)
        self.digits[_grid(n)](cuda.to_device(picked), c, digit)
        counts = cuda.to_device(np.zeros(windows * per_window, dtype=np.int32))
        self.count[_grid(windows * n)](digit, per_window, counts)
        sizes = counts.copy_to_host().astype(np.int64)
        offsets = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        order = cuda.device_array(max(1, int(sizes.sum())), dtype=np.int32)
        self.scatter[_grid(windows * n)](digit, per_window, cuda.to_device(offsets.astype(np.int32)), order)
        keys = np.flatnonzero(sizes)
        if keys.size == 0:  # every scalar is zero
            return (0, 0)
        start, stop, runs = _runs(offsets[keys], sizes[keys], segment)
        partial = cuda.device_array((start.size, 3, self.limbs), dtype=np.uint32)
        self.accumulate[_grid(start.size)](
            bases.points, order, cuda.to_device(start), cuda.to_device(stop), partial
        )
        partial = self._sum_runs(partial, runs, segment)
        buckets = cuda.to_device(np.zeros((windows * per_window, 3, self.limbs), dtype=np.uint32))
        if keys.size:
            self.place[_grid(keys.size)](partial, cuda.to_device(keys.astype(np.int64)), buckets)
        slices = max(1, min(slices or default_slices(c), per_window - 1))
        sliced = cuda.device_array((windows * slices, 3, self.limbs), dtype=np.uint32)
        self.reduce_buckets[_grid(windows * slices)](buckets, per_window, slices, sliced)
        bounds = np.arange(windows, dtype=np.int64) * slices
        totals = cuda.device_array((windows, 3, self.limbs), dtype=np.uint32)
        self.sum_runs[_grid(windows)](sliced, cuda.to_device(bounds), cuda.to_device(bounds + slices), totals)
        out = cuda.device_array((1, 3, self.limbs), dtype=np.uint32)
        self.combine[1, 1](totals, c, out)
        return self._affine(out.copy_to_host()[0])

    def _sum_runs(self, partial: Any, runs: NDArray[np.int64], segment: int) -> Any:
        """Sum each bucket's consecutive partial points (``runs[k]`` of them for the k-th bucket) until
        one point per bucket is left."""
        while runs.size and int(runs.max()) > 1:
            offsets = np.concatenate(([0], np.cumsum(runs)[:-1]))
            start, stop, runs = _runs(offsets, runs, segment)
            out = cuda.device_array((start.size, 3, self.limbs), dtype=np.uint32)
            self.sum_runs[_grid(start.size)](partial, cuda.to_device(start), cuda.to_device(stop), out)
            partial = out
        return partial

    def _affine(self, jacobian: NDArray[np.uint32]) -> tuple[int, int]:
        fq = self.ops.fq
        x, y, z = fq.unmont(jacobian)
        if z == 0:
            return (0, 0)
        p = fq.p
        zi = pow(z, -1, p)
        return (x * zi * zi % p, y * zi * zi * zi % p)


def _runs(
    offsets: NDArray[np.int64], sizes: NDArray[np.int64], segment: int
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
    """Cut each group ``[offsets[k], offsets[k] + sizes[k])`` into runs of at most ``segment`` entries:
    (run starts, run stops, runs per group), the runs of a group consecutive and groups in order."""
    per_group = (sizes + segment - 1) // segment
    group = np.repeat(np.arange(sizes.size), per_group)
    first = np.concatenate(([0], np.cumsum(per_group)[:-1]))
    within = np.arange(group.size, dtype=np.int64) - np.repeat(first, per_group)
    start = offsets[group] + within * segment
    stop = np.minimum(start + segment, offsets[group] + sizes[group])
    return start.astype(np.int64), stop.astype(np.int64), per_group.astype(np.int64)


_KERNELS: dict[int, MsmKernels] = {}


def msm_kernels(q: int) -> MsmKernels:
    """The (process-wide, lazily built) MSM kernels over G1 of the base field ``q``."""
    found = _KERNELS.get(q)
    if found is None:
        found = _KERNELS[q] = MsmKernels(g1_ops(q))
    return found
