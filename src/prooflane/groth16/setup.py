"""A development key setup. UNSAFE FOR PRODUCTION: whoever runs it knows the toxic waste (tau, alpha,
beta, gamma, delta) and can forge proofs. Production keys come from a ceremony (snarkjs phase 2); prooflane
reads those.

The key it makes is the one snarkjs would make from the same secrets: A, B1, B2 at ``u_j(tau)``,
``v_j(tau)``; IC and C at ``(beta*u_j + alpha*v_j + w_j) / gamma`` (public) and ``/ delta`` (private); H at
the odd Lagrange points of the size-2n domain divided by delta; coefficient rows as snarkjs lays them out.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ._pointcheck import remember
from .adapters import Library, library
from .field import from_ints, to_ints
from .prover import BASES
from .r1cs import R1CS
from .roots import root_of_unity
from .zkey import Coefficients, ProvingKey

__all__ = ["setup"]

log = logging.getLogger(__name__)
UNSAFE_NOTICE = "UNSAFE development key: its secrets were sampled locally; never use it in production"


def setup(r1cs: R1CS, *, seed: bytes | None = None, notice: bool = True) -> ProvingKey:
    """Make an UNSAFE development proving key for ``r1cs`` (deterministic when ``seed`` is given); logs
    :data:`UNSAFE_NOTICE` unless ``notice`` is False (a caller that says it itself, where its reader looks:
    the daemon, whose pool processes make the built-in kinds' keys, in its own log)."""
    if notice:
        log.warning(UNSAFE_NOTICE)
    curve, r = r1cs.curve, r1cs.curve.r
    draw = _sampler(r, seed)
    tau, alpha, beta, gamma, delta = (draw() for _ in range(5))
    m, n_pub = r1cs.n_constraints, r1cs.n_public
    n = 1
    while n < m + n_pub + 1:
        n *= 2
    lag = _lagrange(r, root_of_unity(r, n), n, tau)
    u, v, w = (
        _at_tau(r1cs.n_wires, mat.rows, mat.cols, mat.values, lag, r) for mat in (r1cs.a, r1cs.b, r1cs.c)
    )
    for i in range(n_pub + 1):
        u[i] = (u[i] + lag[m + i]) % r
    mixed = [(beta * u[j] + alpha * v[j] + w[j]) % r for j in range(r1cs.n_wires)]
    inv_gamma, inv_delta = pow(gamma, -1, r), pow(delta, -1, r)
    lag2 = _lagrange(r, root_of_unity(r, 2 * n), 2 * n, tau)
    be = library(curve)
    g1 = _multiplier(be, 1)
    g2 = _multiplier(be, 2)
    key = ProvingKey(
        curve=curve,
        n_vars=r1cs.n_wires,
        n_public=n_pub,
        domain_size=n,
        alpha1=be.g1_xy(be.mul(be.g1(be.g1_gen), alpha)),
        beta1=be.g1_xy(be.mul(be.g1(be.g1_gen), beta)),
        beta2=be.g2_xy(be.mul(be.g2(be.g2_gen), beta)),
        gamma2=be.g2_xy(be.mul(be.g2(be.g2_gen), gamma)),
        delta1=be.g1_xy(be.mul(be.g1(be.g1_gen), delta)),
        delta2=be.g2_xy(be.mul(be.g2(be.g2_gen), delta)),
        ic=tuple(be.g1_xy(be.mul(be.g1(be.g1_gen), x * inv_gamma)) for x in mixed[: n_pub + 1]),
        coefficients=_coefficients(r1cs),
        a_points=_rows(g1, u, curve.n8q * 2, curve.q),
        b1_points=_rows(g1, v, curve.n8q * 2, curve.q),
        b2_points=_rows(g2, v, curve.n8q * 4, curve.q),
        c_points=_rows(g1, [x * inv_delta % r for x in mixed[n_pub + 1 :]], curve.n8q * 2, curve.q),
        h_points=_rows(g1, [lag2[2 * i + 1] * inv_delta % r for i in range(n)], curve.n8q * 2, curve.q),
    )
    for section in BASES:  # multiples of the generator, made by the library: in the group by construction
        remember(key.digest, section)
    return key


def _sampler(r: int, seed: bytes | None) -> Callable[[], int]:
    counter = iter(range(1 << 62))

    def draw() -> int:
        while True:
            if seed is None:
                x = secrets.randbelow(r)
            else:
                digest = hashlib.sha512(seed + next(counter).to_bytes(8, "little")).digest()
                x = int.from_bytes(digest, "little") % r
            if x > 1:
                return x

    return draw


def _lagrange(r: int, omega: int, n: int, tau: int) -> list[int]:
    """``L_i(tau)`` over ``<omega>`` of size ``n``: ``(tau^n - 1) / n * omega^i / (tau - omega^i)``."""
    z = (pow(tau, n, r) - 1) * pow(n, -1, r) % r
    if z == 0:
        raise ValueError("tau lies in the domain")  # probability n / r; a fresh seed fixes it
    powers = [1] * n
    for i in range(1, n):
        powers[i] = powers[i - 1] * omega % r
    inverses = _batch_inverse([(tau - p) % r for p in powers], r)
    return [z * p % r * inv % r for p, inv in zip(powers, inverses, strict=True)]


def _batch_inverse(values: Sequence[int], r: int) -> list[int]:
    prefix = [1] * (len(values) + 1)
    for i, v in enumerate(values):
        prefix[i + 1] = prefix[i] * v % r
    inv = pow(prefix[-1], -1, r)
    out = [0] * len(values)
    for i in range(len(values) - 1, -1, -1):
        out[i] = prefix[i] * inv % r
        inv = inv * values[i] % r
    return out


def _at_tau(
    n_wires: int, rows: NDArray[np.int64], cols: NDArray[np.int64], values: Any, lag: list[int], r: int
) -> list[int]:
    out = [0] * n_wires
    for row, col, val in zip(rows.tolist(), cols.tolist(), to_ints(values), strict=True):
        out[col] = (out[col] + val * lag[row]) % r
    return out


def _multiplier(be: Library, group: int) -> Callable[[int], tuple[int, ...]]:
    gen = be.g1(be.g1_gen) if group == 1 else be.g2(be.g2_gen)
    to_xy = be.g1_xy if group == 1 else be.g2_xy
    table = _FixedBase(gen, be.curve.r.bit_length())
    zero = (0,) * (2 * group)

    def times(k: int) -> tuple[int, ...]:
        point = table.mul(k)
        return zero if point is None else tuple(to_xy(point))

    return times


class _FixedBase:
    """Fixed-base scalar multiplication by a table of ``d * 2^(w*i) * G``: about 32 library additions per
    product instead of one library multiplication (~10x faster for setup's hundreds of thousands)."""

    WINDOW = 8

    def __init__(self, gen: Any, bits: int) -> None:
        w = self.WINDOW
        self.rows: list[list[Any]] = []
        base = gen
        for _ in range((bits + w - 1) // w):
            row = [base, base]  # index 0 is never read
            for _ in range(2, 1 << w):
                row.append(row[-1] + base)
            self.rows.append(row)
            base = row[-1] + base
        self.mask = (1 << w) - 1

    def mul(self, k: int) -> Any | None:
        """``k * G`` (``0 <= k < r``), or None for the point at infinity."""
        acc, i, w = None, 0, self.WINDOW
        while k:
            digit = k & self.mask
            if digit:
                acc = self.rows[i][digit] if acc is None else acc + self.rows[i][digit]
            k >>= w
            i += 1
        return acc


def _rows(
    times: Callable[[int], tuple[int, ...]], scalars: Sequence[int], width: int, q: int
) -> NDArray[np.uint8]:
    """Rows of Montgomery-form coordinates (the .zkey layout) of ``k·G`` for each ``k``."""
    n8 = width // len(times(1))
    r_mod = pow(2, 8 * n8, q)
    raw = b"".join((c * r_mod % q).to_bytes(n8, "little") for k in scalars for c in times(k))
    return np.frombuffer(raw, dtype=np.uint8).reshape(len(scalars), width).copy()


def _coefficients(r1cs: R1CS) -> Coefficients:
    """A's entries, then one A row per public signal (and the constant wire), then B's, as snarkjs."""
    m, n_pub = r1cs.n_constraints, r1cs.n_public
    extra = np.arange(n_pub + 1, dtype=np.int64)
    rows = np.concatenate([r1cs.a.rows, m + extra, r1cs.b.rows])
    wires = np.concatenate([r1cs.a.cols, extra, r1cs.b.cols])
    matrix = np.concatenate(
        [np.zeros(r1cs.a.nnz + n_pub + 1, dtype=np.uint32), np.ones(r1cs.b.nnz, dtype=np.uint32)]
    )
    ones = from_ints([1] * (n_pub + 1))
    values = np.concatenate([r1cs.a.values, ones, r1cs.b.values]).astype(np.uint64)
    return Coefficients(matrix=matrix, row=rows, wire=wires, value=values)
