"""Validation of a key's base points: on the curve (vectorised), in the prime-order subgroup (remembered).

Rows hold affine coordinates in Montgomery form (``X = x·R mod q``), as a .zkey stores them, so the curve
equation ``y^2 = x^3 + b`` is checked as ``Y^2·R = X^3 + b·R^3 (mod q)`` over numpy arrays of Python ints
(about 2 µs a BN254 G1 point), with every coordinate below ``q``. On BN254 G1 (cofactor 1) that is the whole
check. BN254 G2 and both groups of BLS12-381 have cofactors, so their points must also lie in the subgroup
of order ``r``: a scalar multiplication per point (70-330 µs). Both checks are paid once per key and
remembered.

The memory of checked sections is a folder of empty files named ``<key digest>.<section>``; the digest is
a SHA-256 over every point of the key (``ProvingKey.digest``), so an entry vouches for exactly those bytes.
The folder is ``$PROOFLANE_POINT_CHECKS`` when set (empty: remember nothing across processes), else
``$XDG_CACHE_HOME/prooflane/point-checks`` (``~/.cache/...``). Whoever can write that folder can vouch for
a key, as whoever can write the data folder can replace it.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from .curves import Curve

__all__ = ["first_off_curve", "known", "memo_dir", "remember"]

ENV = "PROOFLANE_POINT_CHECKS"

# y^2 = x^3 + b: b on G1, and on G2 the twist's b' in Fq2 as (c0, c1).
_B1 = {"bn128": 3, "bls12381": 4}
_B2 = {
    "bn128": (
        19485874751759354771024239261021720505790618469301721065564631296452457478373,
        266929791119991161246907387137283842545076965332900288569378510910307636690,
    ),
    "bls12381": (4, 4),
}


def first_off_curve(curve: Curve, rows: NDArray[np.uint8], group: int) -> int | None:
    """Index of the first row (Montgomery coordinates, none all zero) not on the curve, or None."""
    n8, q = curve.n8q, curve.q
    coords = _coordinates(rows, n8, 2 * group)
    too_big = np.flatnonzero(np.logical_or.reduce([(c >= q).astype(bool) for c in coords]))
    if too_big.size:
        return int(too_big[0])
    r_mod = pow(2, 8 * n8, q)
    if group == 1:
        x, y = coords
        residue = (y * y * r_mod - x * x * x - _B1[curve.name] * r_mod**3) % q  # one reduction: fastest
        bad = np.flatnonzero(residue != 0)
    else:
        x0, x1, y0, y1 = coords
        b0, b1 = (c * r_mod**3 % q for c in _B2[curve.name])
        sq0, sq1 = (x0 * x0 - x1 * x1) % q, 2 * x0 * x1 % q  # x^2
        cube0, cube1 = (sq0 * x0 - sq1 * x1) % q, (sq0 * x1 + sq1 * x0) % q  # x^3
        lhs0, lhs1 = (y0 * y0 - y1 * y1) % q * r_mod, 2 * y0 * y1 % q * r_mod  # y^2 · R
        bad = np.flatnonzero(((lhs0 - cube0 - b0) % q != 0) | ((lhs1 - cube1 - b1) % q != 0))
    return int(bad[0]) if bad.size else None


def _coordinates(rows: NDArray[np.uint8], n8: int, count: int) -> list[NDArray[np.object_]]:
    """The rows' ``count`` coordinates as arrays of Python ints."""
    raw, width, frm = np.ascontiguousarray(rows).tobytes(), rows.shape[1], int.from_bytes
    return [
        np.array(
            [frm(raw[i + k * n8 : i + (k + 1) * n8], "little") for i in range(0, len(raw), width)], object
        )
        for k in range(count)
    ]


# -- the memory of checked sections ----------------------------------------------------------------------

_KNOWN: set[str] = set()  # entries seen in this process
_KNOWN_LOCK = threading.Lock()  # bases load from two threads at once (the two-core BLS12-381 path)


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
