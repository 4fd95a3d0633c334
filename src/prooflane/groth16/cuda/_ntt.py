"""The number-theoretic transform over a scalar field, and the quotient H of Groth16, as numba CUDA
kernels.

Radix-2 Cooley-Tukey on a bit-reversed copy: ``log2 n`` launches of ``n / 2`` butterflies each. The
roots of unity are snarkjs' (so evaluation ``j`` is at ``w_n^j``, no permutation afterwards), and their
powers are computed on the device (one thread per power, by square and multiply), so a domain's tables
cost no host time and are kept per domain size.

``coset_h`` is the device twin of the cpu path's ``_ntt.coset_h``: for each of A, B, C an inverse NTT,
a multiplication by ``n^-1 w_2n^j`` (onto the odd coset), a forward NTT; then ``A B - C`` pointwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from numba import cuda as _cuda
from numpy.typing import NDArray

from ..field import FieldVector
from ..roots import root_of_unity
from ._field import Field, field, to_limbs
from ._runtime import simulated

cuda: Any = _cuda  # numba's types do not describe its kernel API; the simulator swaps this name

__all__ = ["NttKernels", "ntt_kernels"]

THREADS = 256


def _grid(n: int) -> tuple[int, int]:
    threads = 1 if simulated() else min(THREADS, max(1, n))
    return max(1, (n + threads - 1) // threads), threads


@dataclass(frozen=True, eq=False)
class _Domain:
    n: int
    reverse: Any  # device int32 (n,): the bit-reversal permutation
    forward: Any  # device (n/2, L): w_n^j, Montgomery
    inverse: Any  # device (n/2, L): w_n^-j, Montgomery
    coset: Any  # device (n, L): n^-1 w_2n^j, Montgomery

    @property
    def nbytes(self) -> int:
        return int(self.reverse.nbytes + self.forward.nbytes + self.inverse.nbytes + self.coset.nbytes)


class NttKernels:
    """The NTT kernels of one scalar field, compiled on first launch, and its domains' tables."""

    def __init__(self, fr: Field) -> None:
        self.fr = fr
        self._domains: dict[int, _Domain] = {}
        self._build()

    def _build(self) -> None:
        fr = self.fr
        fmul, fadd, fsub, fcopy = fr.mul, fr.add, fr.sub, fr.copy
        r2 = to_limbs([fr.r2], fr.limbs)[0]
        one = to_limbs([1], fr.limbs)[0]
        L = fr.limbs

        @cuda.jit
        def scale(values: Any, factor: Any) -> None:
            """values[i] *= factor (a constant): with R^2 into Montgomery form, with 1 out of it."""
            i = cuda.grid(1)
            if i < values.shape[0]:
                fmul(values[i], values[i], factor)

        @cuda.jit
        def powers(base: Any, first: Any, out: Any) -> None:
            """out[i] = first * base^i (Montgomery), by square and multiply over the bits of i."""
            i = cuda.grid(1)
            if i < out.shape[0]:
                acc = cuda.local.array(L, np.uint32)
                sq = cuda.local.array(L, np.uint32)
                fcopy(acc, first)
                fcopy(sq, base)
                e = i
                while e > 0:
                    if e & 1:
                        fmul(acc, acc, sq)
                    fmul(sq, sq, sq)
                    e >>= 1
                fcopy(out[i], acc)

        @cuda.jit
        def permute(src: Any, order: Any, dst: Any) -> None:
            i = cuda.grid(1)
            if i < dst.shape[0]:
                fcopy(dst[i], src[order[i]])

        @cuda.jit
        def butterflies(values: Any, half: Any, stride: Any, twiddles: Any) -> None:
            i = cuda.grid(1)
            if i < values.shape[0] // 2:
                j = i % half
                k = (i // half) * 2 * half + j
                t = cuda.local.array(L, np.uint32)
                fmul(t, values[k + half], twiddles[j * stride])
                fsub(values[k + half], values[k], t)
                fadd(values[k], values[k], t)

        @cuda.jit
        def multiply(values: Any, factors: Any) -> None:
            i = cuda.grid(1)
            if i < values.shape[0]:
                fmul(values[i], values[i], factors[i])

        @cuda.jit
        def quotient(a: Any, b: Any, c: Any) -> None:
            """a[i] = a[i] b[i] - c[i]."""
            i = cuda.grid(1)
            if i < a.shape[0]:
                fmul(a[i], a[i], b[i])
                fsub(a[i], a[i], c[i])

        self._scale, self._powers, self._permute = scale, powers, permute
        self._butterflies, self._multiply, self._quotient = butterflies, multiply, quotient
        self._constants = (r2, one)

    @cached_property
    def _r2(self) -> Any:
        return cuda.to_device(self._constants[0])

    @cached_property
    def _one(self) -> Any:
        return cuda.to_device(self._constants[1])

    # -- domains ------------------------------------------------------------------------------------------

    def domain(self, n: int) -> _Domain:
        """The tables of the domain of size ``n`` (built on first use, then kept)."""
        found = self._domains.get(n)
        if found is None:
            found = self._domains[n] = self._make_domain(n)
        return found

    def _make_domain(self, n: int) -> _Domain:
        r = self.fr.p
        w = root_of_unity(r, n)
        shift = root_of_unity(r, 2 * n)
        bits = n.bit_length() - 1
        index = np.arange(n, dtype=np.int64)
        rev = np.zeros(n, dtype=np.int64)
        for b in range(bits):
            rev |= ((index >> b) & 1) << (bits - 1 - b)
        half = max(1, n // 2)
        return _Domain(
            n,
            cuda.to_device(rev.astype(np.int32)),
            self._power_table(w, 1, half),
            self._power_table(pow(w, -1, r), 1, half),
            self._power_table(shift, pow(n, -1, r), n),
        )

    def _power_table(self, base: int, first: int, count: int) -> Any:
        out = cuda.device_array((count, self.fr.limbs), dtype=np.uint32)
        bases = cuda.to_device(self.fr.mont([base, first]))
        self._powers[_grid(count)](bases[0], bases[1], out)
        return out

    # -- transforms ---------------------------------------------------------------------------------------

    def _upload(self, vector: FieldVector, n: int) -> Any:
        """A device copy of ``vector`` padded with zeros to ``n`` rows, in Montgomery form."""
        limbs = np.zeros((n, self.fr.limbs), dtype=np.uint32)
        if vector.shape[0]:
            limbs[: vector.shape[0]] = np.ascontiguousarray(vector, dtype="<u8").view("<u4")
        values = cuda.to_device(limbs)
        self._scale[_grid(n)](values, self._r2)
        return values

    def _download(self, values: Any) -> FieldVector:
        self._scale[_grid(values.shape[0])](values, self._one)
        host: NDArray[np.uint32] = values.copy_to_host()
        return np.ascontiguousarray(host.astype("<u4")).view("<u8").astype(np.uint64)

    def _transform(self, values: Any, domain: _Domain, twiddles: Any) -> Any:
        """The NTT of ``values`` (device, Montgomery) with the given table; a fresh device array."""
        n = domain.n
        out = cuda.device_array_like(values)
        self._permute[_grid(n)](values, domain.reverse, out)
        half, stride = 1, n // 2
        while half < n:
            self._butterflies[_grid(n // 2)](out, half, stride, twiddles)
            half, stride = 2 * half, stride // 2
        return out

    def ntt(self, vector: FieldVector, *, inverse: bool = False) -> FieldVector:
        """Evaluations at ``w_n^j`` of the polynomial with coefficients ``vector`` (``n`` its length, a
        power of two); with ``inverse``, the coefficients of the polynomial with those evaluations."""
        n = vector.shape[0]
        domain = self.domain(n)
        values = self._transform(
            self._upload(vector, n), domain, domain.inverse if inverse else domain.forward
        )
        if inverse:
            self._scale[_grid(n)](values, cuda.to_device(self.fr.mont([pow(n, -1, self.fr.p)])[0]))
        return self._download(values)

    def coset_h(self, a: FieldVector, b: FieldVector, c: FieldVector, n: int) -> FieldVector:
        """``a*b - c`` on the odd coset ``w_2n * <w_n>``, from the three vectors' values on ``<w_n>``."""
        domain = self.domain(n)
        on_coset = []
        for vector in (a, b, c):
            coefficients = self._transform(self._upload(vector, n), domain, domain.inverse)
            self._multiply[_grid(n)](coefficients, domain.coset)
            on_coset.append(self._transform(coefficients, domain, domain.forward))
        self._quotient[_grid(n)](*on_coset)
        return self._download(on_coset[0])

    def nbytes(self) -> int:
        """Device bytes held by the domains' tables."""
        return sum(d.nbytes for d in self._domains.values())


_KERNELS: dict[int, NttKernels] = {}


def ntt_kernels(r: int) -> NttKernels:
    """The (process-wide, lazily built) NTT kernels of the scalar field ``r``."""
    found = _KERNELS.get(r)
    if found is None:
        found = _KERNELS[r] = NttKernels(field(r))
    return found
