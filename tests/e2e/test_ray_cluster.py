"""Two Ray nodes on one machine (``ray.cluster_utils.Cluster``: a head and a worker node): the devices are
placed on both, partitions are proven on both, and when the worker node stops mid-run every job still
completes, on the head. Skipped without the ``ray`` extra."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from prooflane.config import Config, RaySettings
from prooflane.devices import RayBackend
from prooflane.engine.engine import Engine
from prooflane.groth16 import Proof, VerificationKey, verify
from prooflane.models import JobRequest
from prooflane.states import JobState, WorkerState

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'prooflane[ray]')")
cluster_utils = pytest.importorskip("ray.cluster_utils")

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(600)]
WAIT = 300.0


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[tuple[Any, Any]]:
    """A head node (4 CPUs: room for both devices' provers and synthesis once alone) and a worker node."""
    cluster = cluster_utils.Cluster(
        initialize_head=True, head_node_args={"num_cpus": 4, "include_dashboard": False}
    )
    worker_node = cluster.add_node(num_cpus=2)
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        yield cluster, worker_node
    finally:
        ray.shutdown()
        cluster.shutdown()


async def test_partitions_run_on_both_nodes_and_survive_the_worker_node_stopping(
    two_nodes: tuple[Any, Any], tmp_path: Path, keys_dir: Path
) -> None:
    cluster, worker_node = two_nodes
    head = ray.get_runtime_context().get_node_id()
    other = worker_node.node_id
    config = Config(
        data_dir=tmp_path / "data", keys_dir=keys_dir, profile="tiny", devices=("cpu:0", "cpu:1"),
        workers_per_device=1, synthesis_workers=2, prefetch_partitions=2, memory_budget_bytes=1 << 30,
        worker_niceness=0, ray=RaySettings(address="auto"),
    )  # fmt: skip
    backend = RayBackend.from_config(config)
    async with Engine(config, backend=backend) as engine:
        assert {backend.device("cpu:0").node, backend.device("cpu:1").node} == {head, other}
        leases: list[tuple[str, str | None]] = []  # (worker id, its node at the lease)
        violations: list[tuple[object, ...]] = []
        stopped = asyncio.Event()

        async def stop_worker_node() -> None:
            await asyncio.to_thread(cluster.remove_node, worker_node)
            stopped.set()

        async def watch() -> None:
            async for item in engine.subscribe():
                violations.append(engine.snapshot().invariant_violations)
                if item.event != "lease_granted":
                    continue
                worker_id = json.loads(item.data)["worker_id"]
                leases.append((worker_id, backend.workers[worker_id].node))
                on_other = [w for w, node in leases if node == other]
                if len(on_other) >= 2 and not stopped.is_set() and not killer:
                    killer.append(asyncio.create_task(stop_worker_node()))

        killer: list[asyncio.Task[None]] = []
        watcher = asyncio.create_task(watch())
        try:
            jobs = [await engine.submit(_request(kind)) for kind in ("porep-c2", "snap-update", "porep-c2")]
            for job_id in jobs:
                proofs = await engine.wait_proof(job_id, WAIT)
                assert proofs is not None, engine.job(job_id)
                _assert_verified(engine, proofs)
            async with asyncio.timeout(WAIT):
                await stopped.wait()
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        nodes = {node for _, node in leases}
        assert nodes == {head, other}  # partitions were proven on both nodes
        # After the worker node stopped, its device's worker came back on the head.
        assert {backend.device(d).node for d in ("cpu:0", "cpu:1")} == {head}
        assert all(w.node == head for w in backend.workers.values())
        assert all(v == () for v in violations)
        async with asyncio.timeout(WAIT):
            while engine.budget.reserved:
                await engine.budget.wait_change()
        snapshot = engine.snapshot()
        assert all(engine.job(j) is not None and engine.job(j).state is JobState.DONE for j in jobs)  # type: ignore[union-attr]
        assert snapshot.memory.reserved_bytes == 0 and snapshot.counters.retries >= 1
        assert {w.state for w in snapshot.workers} == {WorkerState.IDLE}


def _request(kind: str) -> JobRequest:
    return JobRequest.model_validate({"kind": kind, "sector": {"size": 256, "seed": "07"}})


def _assert_verified(engine: Engine, proofs: Any) -> None:
    vk = VerificationKey.from_json(engine.verification_key(proofs.kind))
    for part in proofs.partitions:
        public = tuple(int(x) for x in part.public)
        assert verify(vk, public, Proof.from_json(part.proof, public=public)), part.index
