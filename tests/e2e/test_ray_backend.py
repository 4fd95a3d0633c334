"""The engine on the ray backend, on a local Ray cluster (``ray.init(address="local", num_cpus=2)``).

Real Groth16 proofs at the ``tiny`` profile: synthesis as Ray tasks, the worker as a prover and a finalizer
actor, the synthesized data and the proving state through Ray's object store. Skipped without the ``ray``
extra (`make test` installs it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from prooflane.config import Config, RaySettings
from prooflane.devices import RayBackend
from prooflane.engine.engine import Engine
from prooflane.groth16 import Proof, VerificationKey, verify
from prooflane.models import JobRequest
from prooflane.states import WorkerState
from tests.support.engine import tiny_config

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'prooflane[ray]')")

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]
WAIT = 120.0
KINDS = ("porep-c2", "snap-update", "window-post", "winning-post")


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    """A local Ray instance for the module: two CPUs (one for the worker's prover, one for synthesis)."""
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


def ray_config(tmp_path: Path, keys_dir: Path, **overrides: object) -> Config:
    return tiny_config(tmp_path / "data", keys_dir, worker_niceness=0, ray=RaySettings(address="auto"),
                       **overrides)  # fmt: skip


@contextlib.asynccontextmanager
async def running(config: Config) -> AsyncIterator[tuple[Engine, RayBackend]]:
    backend = RayBackend.from_config(config)
    async with Engine(config, backend=backend) as engine:
        yield engine, backend


async def submit(engine: Engine, kind: str) -> str:
    return await engine.submit(
        JobRequest.model_validate({"kind": kind, "sector": {"size": 256, "seed": "07"}})
    )


def assert_verified(engine: Engine, kind: str, proofs: Any) -> None:
    vk = VerificationKey.from_json(engine.verification_key(kind))
    for part in proofs.partitions:
        public = tuple(int(x) for x in part.public)
        assert verify(vk, public, Proof.from_json(part.proof, public=public)), (kind, part.index)


async def clean(engine: Engine) -> None:
    """Nothing reserved, every invariant holding, every worker live and idle."""
    budget = engine.budget
    async with asyncio.timeout(WAIT):
        while budget.reserved:
            await budget.wait_change()
    snapshot = engine.snapshot()
    assert snapshot.invariant_violations == () and snapshot.illegal_events == 0
    assert snapshot.memory.reserved_bytes == 0 and snapshot.memory.reservations == 0
    assert {w.state for w in snapshot.workers} == {WorkerState.IDLE}


async def test_every_built_in_kind_is_proven_on_ray_and_verifies(
    cluster: None, tmp_path: Path, keys_dir: Path
) -> None:
    async with running(ray_config(tmp_path, keys_dir)) as (engine, backend):
        jobs = {kind: await submit(engine, kind) for kind in KINDS}
        for kind, job_id in jobs.items():
            proofs = await engine.wait_proof(job_id, WAIT)
            assert proofs is not None, kind
            assert_verified(engine, kind, proofs)
        await clean(engine)
        # The worker is two actors on the cluster's one node, which the device names.
        worker = backend.workers["cpu:0/w0"]
        node = ray.get_runtime_context().get_node_id()
        assert worker.node == node and backend.device("cpu:0").node == node
        info = worker.info()
        assert info.prover_pid is not None and info.finalizer_pid is not None
        assert info.prover_pid != info.finalizer_pid


async def test_synthesized_data_stays_in_the_object_store(
    cluster: None, tmp_path: Path, keys_dir: Path
) -> None:
    from prooflane.kinds import synthesize_partition

    async with running(ray_config(tmp_path, keys_dir)) as (engine, backend):
        seen: list[Any] = []
        run = backend.run

        async def spy(call: Callable[..., Any], *args: Any) -> Any:
            result = await run(call, *args)
            if call is synthesize_partition:
                seen.append(result)
            return result

        backend.run = spy  # type: ignore[method-assign]
        job_id = await submit(engine, "winning-post")
        proofs = await engine.wait_proof(job_id, WAIT)
        assert proofs is not None
        assert_verified(engine, "winning-post", proofs)
        assert len(seen) == 1
        data, ms = seen[0]
        assert isinstance(data, ray.ObjectRef) and isinstance(ms, float)


async def test_a_prover_actor_killed_mid_proof_the_job_completes_on_a_new_worker(
    cluster: None, tmp_path: Path, keys_dir: Path
) -> None:
    async with running(ray_config(tmp_path, keys_dir)) as (engine, backend):
        violations: list[tuple[str, ...]] = []
        events: list[tuple[str, dict[str, Any]]] = []
        killed = asyncio.Event()

        async def watch() -> None:
            async for item in engine.subscribe():
                data = json.loads(item.data)
                events.append((item.event, data))
                violations.append(tuple(map(str, engine.snapshot().invariant_violations)))
                if item.event == "lease_granted" and not killed.is_set():
                    killed.set()  # the worker is in its device section, or finalizing it
                    ray.kill(backend.workers[data["worker_id"]].prover, no_restart=True)

        watcher = asyncio.create_task(watch())
        try:
            job_id = await submit(engine, "porep-c2")
            proofs = await engine.wait_proof(job_id, WAIT)
            assert proofs is not None and killed.is_set()
            assert_verified(engine, "porep-c2", proofs)
            await clean(engine)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        names = [name for name, _ in events]
        assert "worker_died" in names
        died = names.index("worker_died")
        assert "worker_registered" in names[died:]  # a new worker took the slot
        assert all(v == () for v in violations) and len(violations) == len(events)
        assert engine.snapshot().memory.reserved_bytes == 0
        assert engine.snapshot().counters.retries >= 1  # what the dead worker held was proven again
