"""The pipelined engine against a sequential prover, on the same workload, in one run.

(a) sequential: this process, one partition at a time: synthesize, prove_start, prove_finish, verify (the
    engine verifies every partition too), with no overlap;
(b) the engine: a real `prooflane serve` (tiny profile by default) fed the same jobs over HTTP.

Both use the same proving keys and sectors and are warmed up first (keys loaded, one job per kind), so the
figures are steady-state. Printed: throughput of each (proofs/hour and partitions/hour), their ratio, the
engine's share of the CPU limit (cores divided by the sequential prover's CPU seconds per partition), the
device busy fraction in steady state (while partitions wait for a device), and peak memory against the
budget. Writes benchmarks/results/bench_pipeline.json. Asserts nothing.

Usage: python benchmarks/bench_pipeline.py [--jobs N] [--mix porep-c2=2,snap-update=1,...] [--profile tiny]
       [--config engine.toml]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

import contextlib

from _common import RESULTS, print_table, write_json
from prooflane._daemon_process import DaemonProcess
from prooflane._workload import DEFAULT_MIX, parse_mix, plan, run_workload
from prooflane.circuits import Sector, profile_by_name
from prooflane.client import Client
from prooflane.devices.keys import load_key
from prooflane.groth16 import prove_finish, prove_start, verify
from prooflane.kinds import StorageInput, SynthesisTask, prepare_builtin, synthesize_partition

CURVE = "bn128"
RANDOMNESS = bytes(range(32))


@dataclass
class SequentialRun:
    """What the sequential prover measured."""

    partitions: int = 0
    wall_secs: float = 0.0
    cpu_secs: float = 0.0
    phase_secs: dict[str, float] = field(
        default_factory=lambda: dict.fromkeys(("synth", "prove", "finalize"), 0.0)
    )


def main() -> None:
    args = _parse()
    kinds = plan(args.jobs, parse_mix(args.mix))
    profile = profile_by_name(args.profile)
    # Proving keys and sectors are made once per profile and kept (git-ignored) for later runs.
    cache = RESULTS / f"pipeline-{profile.name}"
    metas = {kind: prepare_builtin(kind, profile.name, CURVE, str(cache / "keys")) for kind in set(kinds)}
    sectors = [str(_sector(cache / f"sector-{n}", profile.sector_bytes, n + 1)) for n in range(len(kinds))]
    with tempfile.TemporaryDirectory(prefix="prooflane-bench-") as tmp:
        data = Path(tmp) / "data"
        data.mkdir()
        shutil.copytree(cache / "keys", data / "keys")  # the daemon finds its keys made already
        sequential = run_sequential(kinds, sectors, metas, profile.name)
        engine, extra = run_engine(data, kinds, sectors, profile.name, Path(tmp), args.config)
    report(kinds, sequential, engine, extra, args.config)


def _sector(path: Path, size: int, seed: int) -> Path:
    if (path / "meta.json").exists():
        return Sector.open(path).path
    shutil.rmtree(path, ignore_errors=True)  # an interrupted earlier create
    return Sector.create(path, size, seed=seed).path


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=8, help="jobs in the workload (default 8)")
    parser.add_argument("--mix", default=DEFAULT_MIX, help=f"kinds and weights (default {DEFAULT_MIX})")
    parser.add_argument("--profile", default="tiny", help="circuit sizes (default tiny)")
    parser.add_argument("--config", type=Path, help="a daemon config file (TOML) for the engine run")
    return parser.parse_args()


# --- (a) sequential ---------------------------------------------------------------------------


def run_sequential(
    kinds: list[str], sectors: list[str], metas: dict[str, Any], profile: str
) -> SequentialRun:
    """Prove every partition of every job here, one after the other."""
    for kind in set(kinds):  # warm-up: keys loaded, one partition proven per kind
        load_key(metas[kind].key_path, ("a", "b1", "b2", "c", "h"))
        _prove_one(kind, sectors[kinds.index(kind)], 0, metas[kind], profile, SequentialRun())
    run = SequentialRun()
    wall, cpu = time.perf_counter(), time.process_time()
    for n, (kind, sector) in enumerate(zip(kinds, sectors, strict=True)):
        for partition in range(_partitions(kind)):
            _prove_one(kind, sector, partition, metas[kind], profile, run, job=n)
    run.wall_secs = time.perf_counter() - wall
    run.cpu_secs = time.process_time() - cpu
    return run


def _prove_one(
    kind: str, sector: str, partition: int, meta: Any, profile: str, run: SequentialRun, job: int = -1
) -> None:
    task = SynthesisTask(
        f"seq-{job}", partition, meta.key_path, StorageInput(kind, profile, CURVE, sector, RANDOMNESS)
    )
    t0 = time.perf_counter()
    synthesized, _ = synthesize_partition(task)
    t1 = time.perf_counter()
    key = load_key(meta.key_path)
    state = prove_start(key, synthesized)
    t2 = time.perf_counter()
    proof = prove_finish(state)
    if not verify(key.verification_key, proof.public, proof):
        raise SystemExit(f"sequential prover: {kind} partition {partition} did not verify")
    proof.to_json()
    t3 = time.perf_counter()
    run.partitions += 1
    for phase, secs in (("synth", t1 - t0), ("prove", t2 - t1), ("finalize", t3 - t2)):
        run.phase_secs[phase] += secs


def _partitions(kind: str) -> int:
    from prooflane.kinds import kind_spec

    spec = kind_spec(kind)
    assert spec is not None
    return spec.partitions


# --- (b) the engine ---------------------------------------------------------------------------


class Watch:
    """Follows the daemon while the workload runs: steady-state busy time, peak memory."""

    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        self.peak_rss = 0
        self.peak_reserved = 0
        self.budget = 0
        self.window: list[tuple[float, float]] = []  # (time, device busy seconds) while work waits
        self.devices = 1
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._rss_loop, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _rss_loop(self) -> None:
        while not self._stop.wait(0.1):
            self.peak_rss = max(self.peak_rss, tree_rss(self.process))

    def sample(self, snapshot: dict[str, Any]) -> None:
        memory = snapshot["memory"]
        self.budget = memory["total_bytes"]
        self.peak_reserved = max(self.peak_reserved, memory["reserved_bytes"])
        self.devices = max(1, len(snapshot["devices"]))
        counters = snapshot["counters"]
        waiting = counters["queue_depth"] + counters.get("device_queue_depth", 0)
        proving = any(w["state"] != "idle" for w in snapshot["workers"])
        if waiting > 0 and proving:
            busy = sum(w["busy_seconds_total"] for w in snapshot["workers"])
            self.window.append((snapshot["taken_at"], busy))

    def steady_busy_fraction(self) -> float | None:
        if len(self.window) < 2:
            return None
        (t0, b0), (t1, b1) = self.window[0], self.window[-1]
        return (b1 - b0) / ((t1 - t0) * self.devices) if t1 > t0 else None


def tree_rss(process: psutil.Process) -> int:
    """RSS of a process and all its descendants."""
    total = 0
    for p in [process, *process.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            total += p.memory_info().rss
    return total


def tree_cpu(process: psutil.Process) -> float:
    """CPU seconds (user + system) of a process and its live descendants (the engine's workers persist)."""
    total = 0.0
    for p in [process, *process.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            times = p.cpu_times()
            total += times.user + times.system
    return total


def run_engine(
    data: Path, kinds: list[str], sectors: list[str], profile: str, tmp: Path, config: Path | None
) -> tuple[Any, dict[str, Any]]:
    with (
        DaemonProcess(data, profile=profile, config_file=config, log_path=tmp / "daemon.log") as daemon,
        Client(daemon.url) as client,
    ):
        warm = sorted(set(kinds))
        run_workload(client, warm, sectors=[sectors[kinds.index(k)] for k in warm])
        idle_rss = tree_rss(psutil.Process(daemon.pid))
        watch = Watch(daemon.pid)
        watch.start()
        cpu_before = tree_cpu(psutil.Process(daemon.pid))
        result = run_workload(client, kinds, sectors=sectors, on_sample=watch.sample)
        cpu_secs = tree_cpu(psutil.Process(daemon.pid)) - cpu_before
        watch.stop()
    extra = {
        "cpu_secs": cpu_secs,
        "cpu_secs_per_partition": cpu_secs / max(1, result.partitions),
        "idle_rss_bytes": idle_rss,
        "peak_rss_bytes": watch.peak_rss,
        "peak_reserved_bytes": watch.peak_reserved,
        "budget_bytes": watch.budget,
        "steady_busy_fraction": watch.steady_busy_fraction(),
        "steady_window_secs": watch.window[-1][0] - watch.window[0][0] if len(watch.window) > 1 else 0.0,
    }
    return result, extra


# --- report -----------------------------------------------------------------------------------


def report(
    kinds: list[str], seq: SequentialRun, engine: Any, extra: dict[str, Any], config: Path | None
) -> None:
    cores = psutil.cpu_count(logical=True) or 1
    cpu_per_partition = seq.cpu_secs / seq.partitions
    limit_per_hour = cores / cpu_per_partition * 3600
    seq_per_hour = seq.partitions / seq.wall_secs * 3600
    engine_per_hour = engine.partitions / engine.wall_secs * 3600
    payload = {
        "workload": {"jobs": len(kinds), "kinds": kinds, "partitions": seq.partitions},
        "engine_config": str(config) if config else None,
        "cores": cores,
        "load_average_at_end": os.getloadavg(),
        "sequential": {
            "wall_secs": seq.wall_secs,
            "cpu_secs": seq.cpu_secs,
            "cpu_secs_per_partition": cpu_per_partition,
            "cpu_over_wall": seq.cpu_secs / seq.wall_secs,
            "proofs_per_hour": len(kinds) / seq.wall_secs * 3600,
            "partitions_per_hour": seq_per_hour,
            "phase_secs_per_partition": {k: v / seq.partitions for k, v in seq.phase_secs.items()},
            "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        },
        "engine": engine.to_json() | extra,
        "peak_rss_within_budget_plus_idle": extra["peak_rss_bytes"]
        <= extra["budget_bytes"] + extra["idle_rss_bytes"],
        "ratio": engine_per_hour / seq_per_hour,
        "cpu_limit_partitions_per_hour": limit_per_hour,
        "engine_share_of_cpu_limit": engine_per_hour / limit_per_hour,
    }
    rows = [
        (
            "sequential",
            f"{seq.wall_secs:.1f}",
            f"{len(kinds) / seq.wall_secs * 3600:.0f}",
            f"{seq_per_hour:.0f}",
        ),
        ("engine", f"{engine.wall_secs:.1f}", f"{engine.proofs_per_hour:.0f}", f"{engine_per_hour:.0f}"),
    ]
    print_table(["prover", "wall s", "proofs/hour", "partitions/hour"], rows)
    print()
    busy = extra["steady_busy_fraction"]
    print_table(
        ["measure", "value"],
        [
            ("engine / sequential", f"{payload['ratio']:.2f}x"),
            (
                "CPU limit (partitions/hour)",
                f"{limit_per_hour:.0f} ({cores} cores / {cpu_per_partition:.3f} CPU s)",
            ),
            ("engine share of CPU limit", f"{payload['engine_share_of_cpu_limit']:.1%}"),
            (
                "device busy, steady state",
                "n/a" if busy is None else f"{busy:.1%} over {extra['steady_window_secs']:.1f} s",
            ),
            ("device busy, whole run", f"{engine.device_busy_fraction:.1%}"),
            (
                "peak RSS (daemon + workers)",
                f"{extra['peak_rss_bytes'] / 2**20:.0f} MiB (idle {extra['idle_rss_bytes'] / 2**20:.0f} MiB)",
            ),
            (
                "peak reserved / budget",
                f"{extra['peak_reserved_bytes'] / 2**20:.1f} MiB / {extra['budget_bytes'] / 2**20:.0f} MiB",
            ),
            (
                "CPU s per partition",
                f"sequential {cpu_per_partition:.3f}, engine {extra['cpu_secs_per_partition']:.3f}",
            ),
            ("failed jobs", str(engine.failed)),
        ],
    )
    write_json("bench_pipeline", payload)


if __name__ == "__main__":
    main()
