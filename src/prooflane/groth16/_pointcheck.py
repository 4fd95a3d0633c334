"""What both arithmetics share of the validation of a key's base points: the subgroup test by random linear
combinations, and the memory of sections that passed.

Each arithmetic checks a section's rows on the curve itself (``arithmetic/``). On BN254 G1 (cofactor 1) that
is the whole check. BN254 G2 and both groups of BLS12-381 have cofactors, so their points must also lie in
the subgroup of order ``r``. On BLS12-381 that is a per-point endomorphism test (the C extension's, or the
library's: 70-100 µs). On BN254 G2 it is ``all_in_subgroup``: random linear combinations of the whole
section, each tested with one ``[r]S = 0`` (about 0.15 s for 65,000 points in C and 1.0 s on the libraries,
against 15-20 s for ``[r]P = 0`` on every point); see its docstring for why that is sound. Both checks are
paid once per key and remembered.

The memory of checked sections is a folder of empty files named ``<key digest>.<section>``; the digest is
a SHA-256 over every point of the key (``ProvingKey.digest``), so an entry vouches for exactly those bytes.
The folder is ``$PROOFLANE_POINT_CHECKS`` when set (empty: remember nothing across processes), else
``$XDG_CACHE_HOME/prooflane/point-checks`` (``~/.cache/...``). Whoever can write that folder can vouch for
a key, as whoever can write the data folder can replace it.
"""

from __future__ import annotations

import math
import os
import re
import secrets
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .field import FieldVector

__all__ = [
    "BN254_G2_COFACTOR_PRIMES",
    "MAX_SCALAR_BITS",
    "SECURITY_BITS",
    "all_in_subgroup",
    "combination_plan",
    "known",
    "memo_dir",
    "random_scalars",
    "remember",
]

ENV = "PROOFLANE_POINT_CHECKS"

# -- in the subgroup, by random linear combinations -------------------------------------------------------

SECURITY_BITS = 128
"""A key with a point outside the subgroup passes ``all_in_subgroup`` with probability below 2^-128."""

BN254_G2_COFACTOR_PRIMES = (
    10069,
    5864401,
    1875725156269,
    197620364512881247228717050342013327560683201906968909,
)
"""The primes of BN254 G2's cofactor ``h = 2q - r``, each once (``tests/groth16/test_subgroup.py`` checks the
product and their primality). The twist's group ``E'(Fq2)`` has order ``r·h``; as every prime divides it
once, the group is cyclic and ``G2`` is its only subgroup of order ``r``."""


MAX_SCALAR_BITS = 12
"""The widest combination scalars, the cheapest per bit of soundness on both MSMs: zksnake's G2 MSM of 2^16
points costs 0.091 s with 12-bit scalars, 0.119 s with 13-bit ones and 0.059 s with 1-bit ones (one window
of its signed digits up to 12 bits); the C MSM's of 65,003 points on 2 threads 14 ms, 28 ms and 11 ms
(12 bits fill 4,096 affine buckets in one window of 13 bits; 13 bits need 8,192, Jacobian at that size). So
11 rounds: 0.15 s in C, 1.0 s on the libraries."""


def combination_plan(smallest_prime: int) -> tuple[int, int]:
    """``(rounds, bits)``: random scalars of ``bits`` bits, ``2^bits`` below the cofactor's smallest prime
    (so two of them are never equal modulo any of its primes), and enough rounds that
    ``rounds·bits >= SECURITY_BITS``."""
    bits = min(smallest_prime.bit_length() - 1, MAX_SCALAR_BITS)
    return math.ceil(SECURITY_BITS / bits), bits


def all_in_subgroup(
    points: Sequence[Any],
    msm: Callable[[Sequence[Any], FieldVector], Any],
    in_subgroup: Callable[[Any], bool],
    smallest_prime: int,
    rounds: int | None = None,
) -> bool:
    """Whether every one of ``points`` (on the curve, in a group of order ``r·h`` with ``gcd(r, h) = 1``)
    lies in the subgroup of order ``r``, tested by random linear combinations.

    Each round draws fresh scalars ``ρ_i`` uniform in ``[0, 2^bits)`` (``secrets``: unknown to whoever made
    the points) and tests ``S = Σ ρ_i·P_i`` with ``in_subgroup`` (``[r]S = 0``). Every point in the subgroup:
    ``S`` is too, always. A point ``P_k`` outside it has a non-zero component of some prime order ``ℓ``
    dividing ``h``; writing the ``ℓ``-components as ``c_i·T``, ``S`` passes only if ``Σ ρ_i c_i = 0 (mod ℓ)``,
    i.e. only if ``ρ_k`` falls in one residue class mod ``ℓ`` given the other scalars; as ``2^bits < ℓ`` at
    most one of the ``2^bits`` values does: probability ``<= 2^-bits`` a round, ``2^-(rounds·bits)`` over the
    independent rounds. (Scalars much wider than the smallest prime would not help: the bound is ``1/ℓ``.)

    ``rounds`` runs only that many of the plan's rounds: two processes may share the plan's rounds, each
    with its own fresh scalars, the section passing only when every round passed.
    """
    if len(points) == 0:
        return True
    planned, bits = combination_plan(smallest_prime)
    for _ in range(planned if rounds is None else rounds):
        if not in_subgroup(msm(points, random_scalars(len(points), bits))):
            return False
    return True


def random_scalars(count: int, bits: int) -> FieldVector:
    """``count`` scalars uniform in ``[0, 2^bits)`` (``bits <= 32``) from the operating system's CSPRNG, as a
    FieldVector (each its low limb; made as Python ints, 65,000 of them cost 20 ms a round)."""
    words = np.frombuffer(secrets.token_bytes(4 * count), dtype="<u4")
    scalars = np.zeros((count, 4), dtype=np.uint64)
    scalars[:, 0] = words & np.uint32((1 << bits) - 1)
    return scalars


# -- the memory of checked sections ----------------------------------------------------------------------

_KNOWN: set[str] = set()  # entries seen in this process
_KNOWN_LOCK = threading.Lock()  # sections load from several threads at once (in-process workers)


def memo_dir() -> Path | None:
    """The folder where checked sections are remembered, or None when nothing is kept across processes."""
    configured = os.environ.get(ENV)
    if configured is not None:
        return Path(configured) if configured else None
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "prooflane" / "point-checks"


def _entry(digest: str, section: str) -> str:
    return f"{digest}.{re.sub(r'[^A-Za-z0-9_.-]', '_', section)}"


def known(digest: str, section: str) -> bool:
    """Whether the points of ``section`` (or of its whole section, for a slice ``"b1[0:9]"``) of the key
    with ``digest`` were checked in full, here or by an earlier process."""
    names = {_entry(digest, section), _entry(digest, section.split("[")[0])}
    with _KNOWN_LOCK:
        if names & _KNOWN:
            return True
    folder = memo_dir()
    if folder is None or not any((folder / name).exists() for name in names):
        return False
    with _KNOWN_LOCK:
        _KNOWN.update(names)
    return True


def remember(digest: str, section: str) -> None:
    """Record that the points of ``section`` of the key with ``digest`` passed every check."""
    name = _entry(digest, section)
    with _KNOWN_LOCK:
        _KNOWN.add(name)
    folder = memo_dir()
    if folder is None:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).touch()
    except OSError:  # a read-only home: the check is simply run again by the next process
        pass
