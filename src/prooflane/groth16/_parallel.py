"""``prove(..., processes=2)`` without the C extension's MSM: the MSMs of one proof on two cores.

zksnake's MSM holds the GIL, so BN254 uses one persistent helper process that keeps its share of the
key's library points (B2, C and a share of B1) in its own cache; py-arkworks-bls12381's MSM releases the
GIL, so BLS12-381 uses a thread over the shared cache. Meanwhile the caller computes H by NTT and the A, H
and remaining B1 MSMs; the two B1 halves are added at assembly.

A BN254 key not yet checked splits its checks the same way: the helper runs most rounds of the G2
subgroup test (``CALLER_ROUNDS`` fewer) over its B2 points while the caller checks the helper's rows on the
curve beside its own sections and runs the other rounds (measured at 2^16: 0.9 s of rounds there, 0.9 s of
checks here); the caller remembers the helper's sections once everything passed, and no proof is returned
before.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import pickle
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, Any

import numpy as np
from numpy.typing import NDArray

from . import _pointcheck
from ._native import G1, backend
from ._ntt import coset_h
from .curves import BN128, Curve
from .errors import Groth16Error
from .field import FieldVector
from .proof import Proof
from .prover import (
    Synthesized,
    assemble,
    base_points,
    check_fit,
    check_subgroup,
    first_off_curve_row,
    loaded,
    msm,
    preload,
    proving_state,
    release_digest,
    synthesize,
)
from .witness import Witness
from .zkey import ProvingKey

__all__ = ["preload_parallel", "prestart", "prove_parallel", "shutdown"]

# The helper takes B2, C and this share of B1's rows; this process takes H (after the NTT), A and the rest
# of B1. Measured at 2^16 (CPU seconds, one core): BN254 G2 MSM ~2.1x a G1 MSM, the NTT ~0.5 G1 MSM;
# BLS12-381 G2 MSM ~3.1x a G1 MSM (3.2 s against 1.0 s), NTT and synthesis ~0.8 s together.
# Rechecked for BN254 at 2^16 once the key's checks left the load path (two-core prove, medians of 5, two
# passes in varied order): 0.3 slower (4.4-4.6 s), 0.0 to 0.25 level within the run-to-run spread (2.9-4.0 s).
REMOTE_B1_SHARE = {"bn128": 0.2, "bls12381": 0.05}
# Rounds of the G2 subgroup test the caller runs for a key not yet checked (the helper runs the rest):
# with none, the caller waited 0.4 s for the helper at 2^16 (a round costs 0.09 s).
CALLER_ROUNDS = 2


# BLS12-381 with the C extension's NTT and synthesis (0.1 s where the Python path took 0.8): the caller
# keeps C as well, the thread takes B2 and this share of B1 (at 2^16 the caller's G1 MSMs cost about 1.0 s
# each, the thread's B2 3.2 s: 3.1 + 0.55 against 3.2 + 0.45).
NATIVE_BLS_B1_SHARE = 0.45


def _helper_takes_c(key: ProvingKey) -> bool:
    return not (key.curve != BN128 and backend(key.curve).native)


def _split(key: ProvingKey) -> int:
    share = REMOTE_B1_SHARE[key.curve.name] if _helper_takes_c(key) else NATIVE_BLS_B1_SHARE
    return max(1, int(key.n_vars * share))


@dataclass(frozen=True, eq=False)
class _Job:
    """What the helper needs: the key's identity, its rows of the remote sections, and the scalars."""

    curve: Curve
    digest: str
    rows: dict[str, NDArray[np.uint8] | None]  # None: the helper has them cached already
    scalars: dict[str, FieldVector]
    subgroup_rounds: int | None = None  # the caller does the rest of the checks (see ``base_points``)


def _run(job: _Job) -> dict[str, Any]:
    out = dict[str, Any]()
    if job.subgroup_rounds is not None:  # an unchecked key: every attempt runs its rounds afresh
        release_digest(job.digest)
    for name, rows in job.rows.items():
        base_points(job.curve, job.digest, name, rows, subgroup_rounds=job.subgroup_rounds)
        if name not in job.scalars:  # warm-up only
            continue
        out[name] = msm(job.curve, job.digest, name, None, job.scalars[name])
    return out


class _Helper:
    """A persistent helper process (``python -m prooflane.groth16._parallel``) fed length-prefixed pickles
    over its stdin and answering on its stdout. Unlike a multiprocessing pool it never re-imports the
    caller's ``__main__``."""

    def __init__(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "prooflane.groth16._parallel"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self.loaded: set[str] = set()  # digests of keys whose points the helper has built

    def call(self, job: _Job) -> dict[str, Any]:
        """Run ``job``; the key's rows travel only until the helper has built their points."""
        if job.digest in self.loaded and job.scalars and job.subgroup_rounds is None:
            ok, value = self._ask(dataclasses.replace(job, rows=dict.fromkeys(job.rows)))
            if not ok and value == _MISSING:  # the helper evicted this key: send the rows again
                ok, value = self._ask(job)
        else:
            ok, value = self._ask(job)
        if not ok:
            if isinstance(value, Groth16Error):  # a bad key: the very error a load here raises
                raise value
            raise RuntimeError(f"the MSM helper failed: {value}")
        self.loaded.add(job.digest)
        result: dict[str, Any] = value
        return result

    def _ask(self, job: _Job) -> tuple[bool, Any]:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        _send(self._proc.stdin, job)
        answer: tuple[bool, Any] = _receive(self._proc.stdout)
        return answer

    def alive(self) -> bool:
        return self._proc.poll() is None

    def close(self) -> None:
        if self._proc.stdin is not None:
            with contextlib.suppress(OSError):  # a dead helper's pipe may refuse the flush
                self._proc.stdin.close()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()


def _send(stream: IO[bytes], value: object) -> None:
    """Pickle ``value`` with its arrays out of band (protocol 5): their bytes go to the pipe as they lie in
    memory, never copied into the pickle (a 2^20 key's rows for the helper are 200 MB)."""
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    raws = [buffer.raw() for buffer in buffers]
    stream.write(struct.pack(f"<QQ{len(raws)}Q", len(data), len(raws), *(raw.nbytes for raw in raws)))
    stream.write(data)
    for raw in raws:
        stream.write(raw)
    stream.flush()


def _receive(stream: IO[bytes]) -> Any:
    """What :func:`_send` wrote; each array is made over the very buffer its bytes were read into."""
    size, count = struct.unpack("<QQ", _read_exactly(stream, 16))
    sizes = struct.unpack(f"<{count}Q", _read_exactly(stream, 8 * count))
    data = _read_exactly(stream, size)
    return pickle.loads(data, buffers=[_read_exactly(stream, n) for n in sizes])


def _read_exactly(stream: IO[bytes], size: int) -> bytearray:
    out = bytearray(size)
    view, done = memoryview(out), 0
    while done < size:
        got = stream.readinto(view[done:])  # type: ignore[attr-defined]
        if not got:
            raise EOFError("the MSM helper exited")
        done += got
    return out


_MISSING = "missing bases"
_LOCK = threading.Lock()  # guards _THREADS and the swap of _HELPER in shutdown()
_CALL_LOCK = threading.Lock()  # one request at a time on the helper's pipe; guards _HELPER's (re)starts
_HELPER: _Helper | None = None
_THREADS: ThreadPoolExecutor | None = None


def _call_helper(job: _Job) -> dict[str, Any]:
    global _HELPER
    with _CALL_LOCK:
        for attempt in range(2):
            if _HELPER is not None and not _HELPER.alive():
                _HELPER.close()
                _HELPER = None
            if _HELPER is None:
                _HELPER = _Helper()
            try:
                return _HELPER.call(job)
            except (EOFError, OSError):  # it died (killed, out of memory): start a fresh one once
                _HELPER.close()
                _HELPER = None
                if attempt:
                    raise
    raise AssertionError("unreachable")


def _submit(job: _Job) -> Future[dict[str, Any]]:
    """Run ``job`` beside the caller: in the helper process (BN254) or a thread (BLS12-381)."""
    global _THREADS
    with _LOCK:
        if _THREADS is None:
            _THREADS = ThreadPoolExecutor(1, thread_name_prefix="prooflane-msm")
        threads = _THREADS
    if job.curve == BN128:
        return threads.submit(_call_helper, job)
    return threads.submit(_run, job)


def shutdown() -> None:
    """Stop the helper process and thread."""
    global _HELPER, _THREADS
    with _LOCK:
        threads, _THREADS = _THREADS, None
    if threads is not None:
        threads.shutdown(wait=True)
    with _CALL_LOCK:
        helper, _HELPER = _HELPER, None
    if helper is not None:
        helper.close()


atexit.register(shutdown)


def _serve() -> None:
    """The helper's loop: one job in, one answer out, until stdin closes."""
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but answers may reach the parent's pipe
    while True:
        try:
            job = _receive(stdin)
        except EOFError:
            return
        try:
            answer: tuple[bool, Any] = (True, _run(job))
        except LookupError:
            answer = (False, _MISSING)
        except Groth16Error as exc:  # pickles; the caller raises it as it is
            answer = (False, exc)
        except Exception as exc:  # report, keep serving
            answer = (False, f"{type(exc).__name__}: {exc}")
        del job  # its rows and scalars are not kept while the helper waits for the next job
        _send(stdout, answer)
        del answer


def _as_witness(value: Witness | Synthesized) -> Witness:
    return Witness(value.curve, value.witness) if isinstance(value, Synthesized) else value


def _remote_rows(key: ProvingKey) -> dict[str, NDArray[np.uint8]]:
    cut = _split(key)
    rows = {"b2": key.b2_points, "c": key.c_points, f"b1[0:{cut}]": key.b1_points[:cut]}
    if not _helper_takes_c(key):
        del rows["c"]
    return rows


def _remote_job(key: ProvingKey, witness: FieldVector | None, subgroup_rounds: int | None = None) -> _Job:
    cut = _split(key)
    rows: dict[str, NDArray[np.uint8] | None] = dict(_remote_rows(key))
    scalars = {}
    if witness is not None:
        scalars = {"b2": witness, "c": witness[key.n_public + 1 :], f"b1[0:{cut}]": witness[:cut]}
        scalars = {name: scalars[name] for name in rows}
    return _Job(key.curve, key.digest, rows, scalars, subgroup_rounds)


def _unchecked_remote(key: ProvingKey) -> list[str]:
    """The helper's sections of a BN254 key that are not remembered as checked (BLS12-381: none, its
    thread shares this process's checks)."""
    if key.curve != BN128:
        return []
    return [name for name in _remote_rows(key) if not _pointcheck.known(key.digest, name)]


def _helper_rounds(key: ProvingKey) -> int:
    return _pointcheck.combination_plan(_pointcheck.BN254_G2_COFACTOR_PRIMES[0])[0] - CALLER_ROUNDS


def _check_remote_here(key: ProvingKey, names: list[str]) -> None:
    """The caller's part of the helper's unchecked sections: on the curve, and its rounds of B2's test."""
    rows = _remote_rows(key)
    for name in names:
        first_off_curve_row(key.curve, key.digest, name, rows[name])
    if "b2" in names:
        check_subgroup(key.curve, key.digest, "b2", rows["b2"], CALLER_ROUNDS)


def preload_parallel(key: ProvingKey) -> None:
    """Load this process's share of the bases here and the helper's there, side by side."""
    future = _submit(_remote_job(key, None))
    cut = _split(key)
    preload(key, ("a", "h") if _helper_takes_c(key) else ("a", "h", "c"))
    base_points(key.curve, key.digest, f"b1[{cut}:{key.n_vars}]", key.b1_points[cut:])
    future.result()


def prove_parallel(
    key: ProvingKey,
    witness: Witness | Synthesized,
    *,
    randomness: tuple[int, int],
    on_stage: Callable[[str], None] | None = None,
) -> Proof:
    """One proof with B2, C and part of B1 computed by the helper (it needs only the witness, so it starts
    first, loading its bases if it must) while this thread loads its own bases if it must, synthesizes,
    computes H by NTT, then the A, H and remaining B1 MSMs. ``on_stage``: as ``prove``'s."""
    stage = on_stage or (lambda name: None)
    values = witness.witness if isinstance(witness, Synthesized) else witness.values
    if witness.curve != key.curve or values.shape[0] != key.n_vars:
        synthesize(key, _as_witness(witness))  # raises the precise error
    unchecked = _unchecked_remote(key)
    future = _submit(_remote_job(key, values, _helper_rounds(key) if unchecked else None))
    be, curve, digest, cut = backend(key.curve), key.curve, key.digest, _split(key)
    local = {"a": key.a_points, "h": key.h_points, f"b1[{cut}:{key.n_vars}]": key.b1_points[cut:]}
    if not _helper_takes_c(key):
        local["c"] = key.c_points
    try:
        if unchecked or not loaded(key, tuple(local)):
            stage("loading bases")
        _check_remote_here(key, unchecked)  # beside the helper's rounds of the subgroup test
        for name, rows in local.items():
            base_points(curve, digest, name, rows)
        stage("synthesis")
        synthesized = witness if isinstance(witness, Synthesized) else synthesize(key, witness)
        check_fit(key, synthesized)
    except Exception:
        with contextlib.suppress(Exception):  # this error is the one to report
            future.result()  # let the helper finish before the next proof talks to it
        raise
    stage("MSMs")
    w = synthesized.witness
    h = coset_h(be, synthesized.a, synthesized.b, synthesized.c, key.domain_size)
    a = msm(curve, digest, "a", key.a_points, w)
    h_msm = msm(curve, digest, "h", key.h_points, h)
    b1_local = msm(curve, digest, f"b1[{cut}:{key.n_vars}]", key.b1_points[cut:], w[cut:])
    c_local = None if "c" not in local else msm(curve, digest, "c", key.c_points, w[key.n_public + 1 :])
    remote = future.result()
    for name in unchecked:  # on the curve (here) and in the subgroup (there): checked in full
        _pointcheck.remember(digest, name)
    stage("assembly")
    b1 = be.g1(b1_local, trusted=True) + be.g1(remote[f"b1[0:{cut}]"], trusted=True)  # type: ignore[arg-type]
    c = remote["c"] if c_local is None else c_local
    g1: dict[str, G1] = {"a": a, "b1": be.g1_xy(b1), "c": c, "h": h_msm}  # type: ignore[dict-item]
    return assemble(proving_state(key, synthesized, randomness, g1), remote["b2"])


def prestart(curve: Curve) -> None:
    """Start the helper process of ``curve``'s two-core path now (BN254; BLS12-381 uses a thread), so that
    its interpreter starts while the caller reads its files."""
    if curve != BN128:
        return
    global _HELPER
    with _CALL_LOCK:
        if _HELPER is None or not _HELPER.alive():
            _HELPER = _Helper()


if __name__ == "__main__":
    _serve()
