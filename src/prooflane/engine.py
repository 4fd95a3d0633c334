"""The proving pipeline under one asyncio task group.

submit -> journal -> scheduler -> dispatcher (memory budget) -> synthesis pool -> device queue
-> device worker: prove_start under the device lock -> finalizer: prove_finish + verify -> journal -> waiters.
See docs/engine.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from .config import Config
from .models import CircuitInfo, JobProof, JobRequest, JobView, KindInfo

__all__ = ["Engine"]


class Engine:
    """The proving engine: accepts jobs, proves their partitions on devices, hands back verified proofs.

    Use ``async with Engine(config) as engine:`` (or ``await start()`` / ``await stop()``). Every public
    method is called on the event loop that started the engine.
    """

    def __init__(self, config: Config, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config.resolved()
        self._clock = clock
        self.ready = False

    async def __aenter__(self) -> Engine:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        """Open the journal, start synthesis and device worker processes, resume unfinished jobs.

        Returns once the engine accepts jobs and its workers are started (``ready`` is then True).
        """
        raise NotImplementedError

    async def stop(self) -> None:
        """Stop accepting jobs, cancel the pipeline's tasks, end every worker process. Jobs in flight stay
        in the journal unfinished and resume at the next start."""
        raise NotImplementedError

    async def submit(self, req: JobRequest) -> str:
        """Journal a job and queue its partitions; return its id.

        Idempotent on ``req.job_id``: resubmitting an id returns it without a new job (a different request
        under the same id is refused with 409). Raises ``JobRejected`` (status 404 unknown kind or circuit,
        422 bad sector / witnesses / randomness, 413 a partition larger than the whole memory budget, 503 not
        started).
        """
        raise NotImplementedError

    def job(self, job_id: str) -> JobView | None:
        """The job's state and per-partition states, or None when no such job was ever accepted."""
        raise NotImplementedError

    def jobs(self, state: str | None = None, limit: int = 100) -> list[JobView]:
        """Jobs from the journal, newest first, optionally only those in ``state`` (a JobState value)."""
        raise NotImplementedError

    async def wait_proof(self, job_id: str, timeout: float) -> JobProof | None:  # noqa: ASYNC109
        """The job's verified proofs once it is done, waiting up to ``timeout`` seconds.

        Returns None if it is not done by then. Raises ``JobRejected`` (404) for an unknown job and (409)
        for a job that failed or was cancelled, with its error.
        """
        raise NotImplementedError

    async def cancel(self, job_id: str) -> bool:
        """Cancel a job at any stage, freeing its reservations; False when it was already finished.

        Raises ``JobRejected`` (404) for an unknown job.
        """
        raise NotImplementedError

    def kinds(self) -> list[KindInfo]:
        """Every proof kind this engine proves (the built-in ones, then ``circom``)."""
        raise NotImplementedError

    def verification_key(self, kind: str, circuit: str | None = None) -> dict[str, Any]:
        """The snarkjs verification_key.json of ``kind`` (for ``circom``, of the registered ``circuit``).

        Raises ``JobRejected`` (404) for an unknown kind or circuit.
        """
        raise NotImplementedError

    async def register_circuit(
        self, name: str, zkey_path: Path, *, wasm_path: Path | None = None, priority: str = "normal"
    ) -> CircuitInfo:
        """Register a circom circuit for kind ``circom``: its snarkjs .zkey and optionally its circom
        witness generator (.wasm), copied into the data folder so the registration survives restarts.

        Jobs then name it in ``circuit`` and give one witness per partition. Re-registering a name with the
        same files is a no-op; with different files it is refused (409). Raises ``JobRejected`` (422) for a
        file that is missing or not a Groth16 .zkey.
        """
        raise NotImplementedError

    def circuits(self) -> list[CircuitInfo]:
        """The registered circom circuits."""
        raise NotImplementedError

    @property
    def tracker(self) -> Any:
        """The status tracker (events in, snapshots out) that /status, /metrics and SSE read."""
        raise NotImplementedError
