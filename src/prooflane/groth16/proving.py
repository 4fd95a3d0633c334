"""``prove``: a whole proof in one call, as the ``prooflane prove`` command runs it.

The engine never calls this: its workers call the split steps of :mod:`.prover` (``prove_start`` under the
device lock, ``prove_finish`` on the finalizer). Here the steps run back to back in this process, each
call of the C extension on ``threads`` threads (the libraries run on one core).
"""

from __future__ import annotations

from collections.abc import Callable

from .arithmetic import cpu_threads
from .proof import Proof
from .prover import Synthesized, assemble, loaded, msm, preload, prove_start, synthesize
from .witness import Witness
from .zkey import ProvingKey

__all__ = ["prove"]


def prove(
    key: ProvingKey,
    witness: Witness | Synthesized,
    *,
    threads: int | None = None,
    randomness: tuple[int, int] | None = None,
    tables: bool | None = None,
    on_stage: Callable[[str], None] | None = None,
) -> Proof:
    """Synthesize (from the key's A and B) and prove, each call of the C extension on ``threads`` threads
    (default ``cpu_threads()``: every core this process may use, or ``PROOFLANE_THREADS``). ``tables``: the
    fixed-base tables, as ``preload`` takes it (None: the stored ones, where a daemon with ``msm_tables``
    or an earlier ``tables=True`` left them; True: built and stored first where missing). ``on_stage`` is
    called with each stage's name as it begins: "loading bases" (only when this process has not loaded
    them yet, or builds tables), "synthesis", "MSMs", "assembly"."""
    stage = on_stage or _no_stage
    threads = threads or cpu_threads()
    if not loaded(key) or tables:
        stage("loading bases")
        preload(key, tables=tables)
    stage("synthesis")
    synthesized = witness if isinstance(witness, Synthesized) else synthesize(key, witness)
    stage("MSMs")
    state = prove_start(key, synthesized, randomness=randomness, threads=threads)
    b2 = msm(key.curve, key.digest, "b2", key.b2_points, state.witness, threads=threads)
    stage("assembly")
    return assemble(state, b2)  # type: ignore[arg-type]


def _no_stage(name: str) -> None:
    """The default ``on_stage``: stages are not reported."""
