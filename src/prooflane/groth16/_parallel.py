"""``prove(..., processes=2)``: the MSMs of one proof on two cores.

zksnake's MSM holds the GIL, so BN254 uses one persistent helper process that keeps its share of the
key's library points (B2 and C) in its own cache; py-arkworks-bls12381's MSM releases the GIL, so
BLS12-381 uses a thread over the shared cache. The caller's process computes H and the A, B1, H MSMs
meanwhile.
"""

from __future__ import annotations

import atexit
import multiprocessing
import threading
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ._native import backend
from ._ntt import coset_h
from .curves import BN128, Curve
from .field import FieldVector
from .proof import Proof
from .prover import Synthesized, _assemble, _check, _msm, _rows, _scalars, _state, preload
from .zkey import ProvingKey

__all__ = ["preload_parallel", "prove_parallel", "shutdown"]

_REMOTE = ("b2", "c")
_LOCAL = ("a", "b1", "h")


@dataclass(frozen=True, eq=False)
class _Job:
    """What the helper needs: the key's identity, its rows of the remote sections, and the scalars."""

    curve: Curve
    digest: str
    rows: dict[str, NDArray[np.uint8]]
    scalars: dict[str, FieldVector]


def _run(job: _Job) -> dict[str, Any]:
    be, out = backend(job.curve), dict[str, Any]()
    for name, rows in job.rows.items():
        if name not in job.scalars:  # warm-up only
            from .prover import _bases

            _bases(job.curve, job.digest, name, rows)
            continue
        point = _msm(job.curve, job.digest, name, rows, job.scalars[name])
        out[name] = be.g2_xy(point) if name == "b2" else be.g1_xy(point)
    return out


_LOCK = threading.Lock()  # guards the lazily created executors
_EXECUTORS: dict[str, Executor] = {}


def _executor(curve: Curve) -> Executor:
    kind = "process" if curve == BN128 else "thread"
    with _LOCK:
        found = _EXECUTORS.get(kind)
        if found is None:
            if kind == "process":
                found = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
            else:
                found = ThreadPoolExecutor(1, thread_name_prefix="prooflane-msm")
            _EXECUTORS[kind] = found
        return found


def _submit(job: _Job) -> dict[str, Any]:
    try:
        return _executor(job.curve).submit(_run, job).result()
    except BrokenProcessPool:  # the helper died (killed, out of memory): start a fresh one once
        with _LOCK:
            _EXECUTORS.pop("process", None)
        return _executor(job.curve).submit(_run, job).result()


def shutdown() -> None:
    """Stop the helper process and thread."""
    with _LOCK:
        executors = list(_EXECUTORS.values())
        _EXECUTORS.clear()
    for ex in executors:
        ex.shutdown(wait=True, cancel_futures=True)


atexit.register(shutdown)


def preload_parallel(key: ProvingKey) -> None:
    """Load the local sections here and the remote ones in the helper, side by side."""
    job = _Job(key.curve, key.digest, {n: _rows(key, n) for n in _REMOTE}, {})
    future = _executor(key.curve).submit(_run, job)
    preload(key, _LOCAL)
    future.result()


def prove_parallel(key: ProvingKey, synthesized: Synthesized, *, randomness: tuple[int, int]) -> Proof:
    """One proof with B2 and C computed by the helper while this thread computes H, A, B1 and H's MSM."""
    _check(key, synthesized)
    scalars = {n: _scalars(key, n, synthesized.witness, None) for n in _REMOTE}
    job = _Job(key.curve, key.digest, {n: _rows(key, n) for n in _REMOTE}, scalars)
    future = _executor(key.curve).submit(_run, job)
    be = backend(key.curve)
    h = coset_h(be, synthesized.a, synthesized.b, synthesized.c, key.domain_size)
    g1: dict[str, Any] = {}
    for name in _LOCAL:
        scal = _scalars(key, name, synthesized.witness, h)
        g1[name] = be.g1_xy(_msm(key.curve, key.digest, name, _rows(key, name), scal))
    try:
        remote = future.result()
    except BrokenProcessPool:
        remote = _submit(job)
    g1["c"] = remote["c"]
    return _assemble(_state(key, synthesized, randomness, g1), remote["b2"])
