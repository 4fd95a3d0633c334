"""The embedded engine (process backend) against the same engine on a local Ray cluster, one workload.

Both runs: the engine in this process with the same config (the defaults: one ``cpu`` device per core,
one worker per device, one synthesis slot), the same proving keys, the same jobs; each warmed up first until
every worker holds every kind's key, so the figures are steady-state. The Ray run starts a local Ray instance
with one logical CPU for each device and each synthesis slot (what ``RayBackend.from_config`` gives a
``local`` instance), so every device and synthesis slot can run at once, as on the embedded engine.

Printed: throughput of each (partitions/hour), the ratio, the extra wall-clock time per partition on Ray
((Ray's wall time - the embedded one) / partitions, in ms), and Ray's own round trips (an empty task, an
actor call) for scale, with the machine's load average before and after. Writes
benchmarks/results/bench_ray-<profile>.json. Asserts nothing.

Usage: python benchmarks/bench_ray.py [--profile small] [--rounds 2] [--ray-first]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import RESULTS, claim_cpu, print_table, write_json
from prooflane.circuits import profile_by_name
from prooflane.config import Config, RaySettings
from prooflane.devices import DeviceBackend, RayBackend
from prooflane.engine.engine import Engine
from prooflane.models import JobRequest

KINDS = ("porep-c2", "snap-update", "window-post", "winning-post")


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="small", help="circuit sizes (default small)")
    parser.add_argument(
        "--rounds", type=int, default=2, help="jobs of each kind in the timed run (default 2)"
    )
    parser.add_argument("--ray-first", action="store_true", help="run on Ray first, then embedded")
    return parser.parse_args()


def _config(data: Path, keys: Path, profile: str, *, ray: bool) -> Config:
    return Config(
        data_dir=data, keys_dir=keys, profile=profile, ray=RaySettings(address="auto" if ray else "")
    ).resolved()


WARM_ROUNDS = 4  # at most: each round gives every worker one job of each kind still missing somewhere


async def _warm(engine: Engine, request: Callable[[str, int], JobRequest]) -> int:
    """Prove warm-up jobs until every worker holds every kind's key (the snapshot's allocations), so that
    no key is loaded while the run is timed. Returns the rounds it took."""
    for round_ in range(1, WARM_ROUNDS + 1):
        snapshot = engine.snapshot()
        workers = [w.worker_id for w in snapshot.workers]
        held = [a.name for a in snapshot.allocations]
        missing = [k for k in KINDS if sum(1 for name in held if f":{k}" in name) < len(workers)]
        if round_ > 1 and not missing:
            return round_ - 1
        jobs = [await engine.submit(request(k, 100 + i)) for k in missing for i in range(len(workers))]
        for job_id in jobs:
            assert await engine.wait_proof(job_id, 3600) is not None
    return WARM_ROUNDS


async def _run(config: Config, backend: DeviceBackend | None, rounds: int) -> dict[str, Any]:
    size = profile_by_name(config.profile).sector_bytes

    def request(kind: str, seed: int) -> JobRequest:
        return JobRequest.model_validate({"kind": kind, "sector": {"size": size, "seed": f"{seed:02x}"}})

    async with Engine(config, backend=backend) as engine:
        warm_rounds = await _warm(engine, request)
        started = time.perf_counter()
        jobs = [await engine.submit(request(kind, 2 + r)) for r in range(rounds) for kind in KINDS]
        partitions = 0
        for job_id in jobs:
            proofs = await engine.wait_proof(job_id, 3600)
            assert proofs is not None
            partitions += len(proofs.partitions)
        wall = time.perf_counter() - started
    return {
        "jobs": len(jobs),
        "partitions": partitions,
        "wall_secs": wall,
        "partitions_per_hour": partitions / wall * 3600,
        "warm_up_rounds": warm_rounds,
    }


async def _ray_round_trips(count: int = 50) -> dict[str, float]:
    import ray

    @ray.remote(num_cpus=0)
    def empty() -> None:
        return None

    @ray.remote(num_cpus=0)
    class Echo:
        def call(self) -> None:
            return None

    async def mean_ms(call: Callable[[], Any]) -> float:
        await call()
        started = time.perf_counter()
        for _ in range(count):
            await call()
        return (time.perf_counter() - started) / count * 1000

    echo = Echo.remote()  # type: ignore[attr-defined]
    return {
        "task_round_trip_ms": await mean_ms(lambda: empty.remote()),
        "actor_call_ms": await mean_ms(lambda: echo.call.remote()),
    }


def main() -> None:
    args = _parse()
    profile = profile_by_name(args.profile)
    keys = RESULTS / f"ray-{profile.name}" / "keys"  # made once per profile and kept (git-ignored)
    keys.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:

        def run_embedded() -> dict[str, Any]:
            return asyncio.run(
                _run(_config(Path(tmp) / "embedded", keys, profile.name, ray=False), None, args.rounds)
            )

        def run_on_ray() -> tuple[dict[str, Any], dict[str, float]]:
            import ray

            config = _config(Path(tmp) / "ray", keys, profile.name, ray=True)
            cpus = (
                len(config.devices) * config.ray.device_cpus
                + config.synthesis_workers * config.ray.synthesis_cpus
            )
            ray.init(address="local", num_cpus=math.ceil(cpus), include_dashboard=False, log_to_driver=False)
            try:
                result = asyncio.run(_run(config, RayBackend.from_config(config), args.rounds))
                return result, asyncio.run(_ray_round_trips())
            finally:
                ray.shutdown()

        if args.ray_first:
            on_ray, trips = run_on_ray()
            embedded = run_embedded()
        else:
            embedded = run_embedded()
            on_ray, trips = run_on_ray()
    load_after = os.getloadavg()
    ratio = on_ray["partitions_per_hour"] / embedded["partitions_per_hour"]
    overhead_ms = (on_ray["wall_secs"] - embedded["wall_secs"]) / on_ray["partitions"] * 1000
    print(f"profile {profile.name}, {on_ray['jobs']} jobs, {on_ray['partitions']} partitions")
    print_table(
        ["run", "wall s", "partitions/h"],
        [
            ["embedded (process backend)", embedded["wall_secs"], round(embedded["partitions_per_hour"])],
            ["local Ray cluster", on_ray["wall_secs"], round(on_ray["partitions_per_hour"])],
        ],
    )
    print_table(
        ["Ray/embedded", "extra ms/partition", "task round trip ms", "actor call ms", "load 1m before/after"],
        [[ratio, overhead_ms, trips["task_round_trip_ms"], trips["actor_call_ms"],
          f"{load_before[0]:.2f} / {load_after[0]:.2f}"]],
    )  # fmt: skip
    write_json(
        f"bench_ray-{profile.name}" + ("-ray-first" if args.ray_first else ""),
        {
            "profile": profile.name,
            "order": "ray first" if args.ray_first else "embedded first",
            "embedded": embedded,
            "ray": on_ray,
            "ratio": ratio,
            "overhead_ms_per_partition": overhead_ms,
            **trips,
            "load_before": load_before,
            "load_after": load_after,
        },
    )


if __name__ == "__main__":
    with claim_cpu():
        main()
