"""``prove``: a whole proof in one call, on one core or more, as the ``prooflane prove`` command runs it.

The engine never calls this: its workers call the split steps of :mod:`.prover` (``prove_start`` under the
device lock, ``prove_finish`` on the finalizer). Here the steps run back to back in this process: where the
C extension does the curve's MSMs, each of them on ``processes`` threads; otherwise on one core
(``processes=1``) or with the MSMs spread over two (:mod:`._parallel`).
"""

from __future__ import annotations

from collections.abc import Callable

from ._native import backend, cpu_threads
from .curves import Curve
from .proof import Proof
from .prover import (
    BASES,
    Synthesized,
    assemble,
    blinding,
    loaded,
    msm,
    prove_start,
    synthesize,
)
from .prover import preload as preload_here
from .witness import Witness
from .zkey import ProvingKey

__all__ = ["bases_loaders", "default_processes", "preload", "prestart", "prove"]

AUTO_TWO_CORES_DOMAIN = 1 << 12
"""Without the C extension's MSM, keys below this domain prove on one core: starting the helper process
costs more than the second core saves."""


def default_processes(key: ProvingKey) -> int:
    """The cores ``prooflane prove`` uses unless told: every core this process may use where the C
    extension does the MSMs (its threads cost microseconds to start); else 2 for keys of at least
    ``AUTO_TWO_CORES_DOMAIN``, 1 below."""
    if backend(key.curve).native_msm:
        return cpu_threads()
    return min(2, cpu_threads()) if key.domain_size >= AUTO_TWO_CORES_DOMAIN else 1


def prove(
    key: ProvingKey,
    witness: Witness | Synthesized,
    *,
    processes: int = 1,
    randomness: tuple[int, int] | None = None,
    on_stage: Callable[[str], None] | None = None,
) -> Proof:
    """Synthesize (from the key's A and B) and prove on ``processes`` cores. Where the C extension does the
    curve's MSMs (BN254), every MSM and the NTT run on that many threads; otherwise ``processes=2`` runs
    the MSMs on two cores: a helper process (BN254) or thread (BLS12-381, whose MSM releases the GIL) takes
    B2, C and part of B1, starting before this process synthesizes. ``on_stage`` is called with each
    stage's name as it begins: "loading bases" (only when this process has not checked or built them
    yet), "synthesis", "MSMs", "assembly"."""
    stage = on_stage or _no_stage
    threads = max(1, processes)
    if processes > 1 and not backend(key.curve).native_msm:
        from ._parallel import prove_parallel

        return prove_parallel(key, witness, randomness=blinding(key.curve, randomness), on_stage=stage)
    if not loaded(key):
        stage("loading bases")
        preload_here(key)
    stage("synthesis")
    synthesized = witness if isinstance(witness, Synthesized) else synthesize(key, witness)
    stage("MSMs")
    state = prove_start(key, synthesized, randomness=randomness, threads=threads)
    b2 = msm(key.curve, key.digest, "b2", key.b2_points, state.witness, threads=threads)
    stage("assembly")
    return assemble(state, b2)  # type: ignore[arg-type]


def preload(key: ProvingKey, parts: tuple[str, ...] = BASES, *, processes: int = 1) -> None:
    """Build this process's library points for ``parts`` of ``key`` now (otherwise the first proof pays for
    it); with ``processes=2`` also warm the helper that ``prove(..., processes=2)`` uses."""
    if processes > 1 and not backend(key.curve).native_msm:
        from ._parallel import preload_parallel

        preload_parallel(key)
        return
    preload_here(key, parts)


def prestart(curve: Curve) -> None:
    """Start the helper of ``curve``'s two-core path now (BN254 without the C extension: a process;
    BLS12-381 uses a thread; the C extension none), so that its interpreter starts while the caller reads
    its files."""
    if backend(curve).native_msm:
        return
    from ._parallel import prestart as start_helper

    start_helper(curve)


def bases_loaders(curve: Curve) -> dict[str, str]:
    """How this process builds ``curve``'s G1 and G2 library points (``prove --json`` reports it):
    "rows" where the C extension computes over the key's rows and builds none."""
    be = backend(curve)
    if be.native_msm:
        return {"g1": "rows", "g2": "rows"}
    return {"g1": be.loader(1), "g2": be.loader(2)}


def _no_stage(name: str) -> None:
    """The default ``on_stage``: stages are not reported."""
