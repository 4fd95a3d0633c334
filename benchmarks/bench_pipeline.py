"""The pipelined engine against the non-pipelined prover on one and on two cores, same workload, one run.

(a) sequential, 1 core: this process, one partition at a time: synthesize, prove_start, prove_finish (the
    C extension's MSMs on one thread), verify (the engine verifies every partition too), with no overlap;
(b) sequential, 2 cores: the same, one partition at a time, synthesis included, proving with
    ``groth16.prove(..., threads=2)`` (each MSM and the NTT on two threads with the C extension; the
    libraries run on one core), and verify;
(c) two 1-core provers side by side: two processes, each proving every other partition as (a) does, with
    no pipeline and nothing shared. It is the ceiling for any layout on these cores that spends no CPU on
    coordination, and its CPU per partition against (a)'s is what running two MSM-heavy processes at once
    costs on this machine (shared caches and memory bandwidth), whoever runs them;
(d) the engine: a real `prooflane serve` fed the same jobs over HTTP.

The rows run one after another. All use the same proving keys and sectors and are warmed up first (every
key loaded: in this process, in the 2-core prover's helper, and in every worker process of the engine), so
the figures are steady-state. The headline is the engine against the 2-core prover. Also printed: the
engine's CPU seconds per partition by kind of process (daemon, provers, finalizers, synthesis) against
the 1-core prover's, their context switches, the CPU-heavy processes runnable at once over time, the device
busy fraction in steady state (while partitions wait for a device), peak memory of the daemon's process
tree (summed RSS, and PSS, which counts shared pages once), and `perf stat` counters of the engine's
processes where `perf` works (hardware counters when the machine exposes them, else software ones).
Writes benchmarks/results/bench_pipeline-<profile>.json. Asserts nothing.

With ``--circuit merkle`` or ``--circuit sha256`` it runs the same four ways on a stream of circom inputs
instead, their witnesses computed as part of the work, in alternating rounds (pipeline_circom.py says how).

Usage: python benchmarks/bench_pipeline.py [--profile tiny[,small,medium]] [--jobs N[,N,N]]
       [--mix porep-c2=2,snap-update=1,...] [--config engine.toml]
       python benchmarks/bench_pipeline.py --circuit merkle|sha256 [--inputs 12] [--repeat 3]
       [--paths 16 --depth 16 | --bits 512] [--config engine.toml]
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    RESULTS,
    claim_cpu,
    cpu_model,
    print_table,
    tree,
    tree_pss,
    tree_rss,
    wait_for_tables,
    write_json,
)
from poseidon_merkle import DEPTH, PATHS
from prooflane.circuits import Sector, profile_by_name
from prooflane.cli.daemon_process import DaemonProcess
from prooflane.cli.workload import DEFAULT_MIX, parse_mix, plan, run_workload
from prooflane.client import Client
from prooflane.config import Config
from prooflane.devices.keys import load_key
from prooflane.devices.roles import Role
from prooflane.groth16 import preload, prove, prove_finish, prove_start, verify
from prooflane.kinds import StorageInput, SynthesisTask, prepare_builtin, synthesize_partition

CURVE = "bn128"
RANDOMNESS = bytes(range(32))
DEFAULT_JOBS = {"tiny": 32, "small": 8, "medium": 2}
# The engine's processes by name (prooflane.devices.roles); anything else is "other".
ROLES = {Role.PROVER.value: "provers", Role.FINALIZER.value: "finalizers", Role.SYNTHESIS.value: "synthesis"}
CPU_HEAVY = tuple(ROLES)
HARDWARE_EVENTS = "instructions,cycles,cache-references,cache-misses"
SOFTWARE_EVENTS = "task-clock,context-switches,cpu-migrations,page-faults"
# The plain provers keep what the engine keeps: every base section loaded, with its fixed-base tables (built
# once a machine and stored, as the engine's are: the best a user of plain provers could do).
BASES = ("a", "b1", "b2", "c", "h")


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
    if args.circuit:
        import pipeline_circom

        if args.inputs < 2 or args.repeat < 1:
            raise SystemExit("--inputs must be at least 2 (one a side) and --repeat at least 1")
        sizes = (args.paths, args.depth, args.bits)
        pipeline_circom.run(args.circuit, args.inputs, args.repeat, *sizes, args.config)
        return
    profiles = [p.strip() for p in args.profile.split(",") if p.strip()]
    jobs = [int(j) for j in args.jobs.split(",")] if args.jobs else [DEFAULT_JOBS[p] for p in profiles]
    if len(jobs) == 1:
        jobs *= len(profiles)
    if len(jobs) != len(profiles):
        raise SystemExit("--jobs: one number, or one per profile")
    for name, count in zip(profiles, jobs, strict=True):
        run_profile(name, plan(count, parse_mix(args.mix)), args.config)


def run_profile(name: str, kinds: list[str], config: Path | None) -> None:
    """The four rows for one profile, one after another, and their report."""
    profile = profile_by_name(name)
    print(f"== {profile.name}: {len(kinds)} jobs, load average {_load()}, CPU {cpu_model()}", flush=True)
    # Proving keys and sectors are made once per profile and kept (git-ignored) for later runs.
    cache = RESULTS / f"pipeline-{profile.name}"
    metas = {kind: prepare_builtin(kind, profile.name, CURVE, str(cache / "keys")) for kind in set(kinds)}
    sectors = [str(_sector(cache / f"sector-{n}", profile.sector_bytes, n + 1)) for n in range(len(kinds))]
    loads = {"start": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="prooflane-bench-") as tmp:
        data = Path(tmp) / "data"
        data.mkdir()
        shutil.copytree(cache / "keys", data / "keys")  # the daemon finds its keys made already
        with niced(Config.load(config).worker_niceness):  # the engine's workers run this far below it
            sequential = run_sequential(kinds, sectors, metas, profile.name)
            loads["after_1_core"] = os.getloadavg()
            two_cores = run_two_cores(kinds, sectors, metas, profile.name)
            loads["after_2_cores"] = os.getloadavg()
            side = run_side_by_side(kinds, sectors, metas, profile.name)
            loads["after_side_by_side"] = os.getloadavg()
        # The daemon reads sectors only inside its data folder (unless its config lists allowed_roots).
        served = [str(shutil.copytree(s, data / "sectors" / Path(s).name)) for s in sectors]
        engine, extra = run_engine(data, kinds, served, metas, profile.name, Path(tmp), config)
        loads["after_engine"] = os.getloadavg()
    report(profile.name, kinds, sequential, two_cores, side, engine, extra, config, loads)


@contextlib.contextmanager
def niced(niceness: int) -> Iterator[None]:
    """Run the sequential provers (and the 2-core prover's helper, started inside) at the niceness the
    engine's proving processes get, so that on a shared machine both compete for the cores on equal terms;
    back to the previous niceness after (raising it again needs the privilege to do so; without it the
    rest of the run stays niced, which only the engine's daemon process, not its workers, would notice)."""
    before = os.getpriority(os.PRIO_PROCESS, 0)
    os.setpriority(os.PRIO_PROCESS, 0, min(19, before + niceness))
    try:
        yield
    finally:
        with contextlib.suppress(PermissionError):
            os.setpriority(os.PRIO_PROCESS, 0, before)


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def _sector(path: Path, size: int, seed: int) -> Path:
    if (path / "meta.json").exists():
        return Sector.open(path).path
    shutil.rmtree(path, ignore_errors=True)  # an interrupted earlier create
    return Sector.create(path, size, seed=seed).path


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--jobs",
        help="jobs in the workload, one number or one per profile (default: tiny 32, small 8, medium 2)",
    )
    parser.add_argument("--mix", default=DEFAULT_MIX, help=f"kinds and weights (default {DEFAULT_MIX})")
    parser.add_argument("--profile", default="tiny", help="circuit sizes, comma-separated (default tiny)")
    parser.add_argument("--config", type=Path, help="a daemon config file (TOML) for the engine run")
    circom = parser.add_argument_group("circom rows (instead of the profiles)")
    circom.add_argument("--circuit", choices=("merkle", "sha256"), help="prove circom inputs of this circuit")
    circom.add_argument("--inputs", type=int, default=12, help="inputs a round (default 12)")
    circom.add_argument("--repeat", type=int, default=3, help="rounds, alternating the order (default 3)")
    circom.add_argument("--paths", type=int, default=PATHS, help=f"merkle: paths (default {PATHS})")
    circom.add_argument("--depth", type=int, default=DEPTH, help=f"merkle: depth (default {DEPTH})")
    circom.add_argument("--bits", type=int, default=512, help="sha256: input bits (default 512)")
    return parser.parse_args()


# --- (a) sequential ---------------------------------------------------------------------------


def run_sequential(
    kinds: list[str], sectors: list[str], metas: dict[str, Any], profile: str
) -> SequentialRun:
    """Prove every partition of every job here, one after the other."""
    for kind in set(kinds):  # warm-up: keys and their fixed-base tables loaded, one partition proven per kind
        load_key(metas[kind].key_path, BASES, tables=True)
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
    state = prove_start(key, synthesized, threads=1)  # one core: the C extension's MSMs on one thread
    t2 = time.perf_counter()
    proof = prove_finish(state, threads=1)
    if not verify(key.verification_key, proof.public, proof):
        raise SystemExit(f"sequential prover: {kind} partition {partition} did not verify")
    proof.to_json()
    t3 = time.perf_counter()
    run.partitions += 1
    for phase, secs in (("synth", t1 - t0), ("prove", t2 - t1), ("finalize", t3 - t2)):
        run.phase_secs[phase] += secs


def run_two_cores(kinds: list[str], sectors: list[str], metas: dict[str, Any], profile: str) -> SequentialRun:
    """Prove every partition one after the other with ``prove(..., threads=2)``: synthesis here, each MSM
    and the NTT on two threads (the libraries: one core)."""
    for kind in set(kinds):  # warm-up: every key with its tables, one partition proven
        preload(load_key(metas[kind].key_path, BASES, tables=True))
        _prove_two(kind, sectors[kinds.index(kind)], 0, metas[kind], profile, SequentialRun())
    run = SequentialRun()
    me = psutil.Process()
    wall, cpu = time.perf_counter(), time.process_time() + _children_cpu(me)
    for n, (kind, sector) in enumerate(zip(kinds, sectors, strict=True)):
        for partition in range(_partitions(kind)):
            _prove_two(kind, sector, partition, metas[kind], profile, run, job=n)
    run.wall_secs = time.perf_counter() - wall
    run.cpu_secs = time.process_time() + _children_cpu(me) - cpu
    return run


def _children_cpu(process: psutil.Process) -> float:
    total = 0.0
    for child in process.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            times = child.cpu_times()
            total += times.user + times.system
    return total


def _prove_two(
    kind: str, sector: str, partition: int, meta: Any, profile: str, run: SequentialRun, job: int = -1
) -> None:
    task = SynthesisTask(
        f"two-{job}", partition, meta.key_path, StorageInput(kind, profile, CURVE, sector, RANDOMNESS)
    )
    t0 = time.perf_counter()
    synthesized, _ = synthesize_partition(task)
    t1 = time.perf_counter()
    key = load_key(meta.key_path)
    proof = prove(key, synthesized, threads=2)
    if not verify(key.verification_key, proof.public, proof):
        raise SystemExit(f"2-core prover: {kind} partition {partition} did not verify")
    proof.to_json()
    t2 = time.perf_counter()
    run.partitions += 1
    run.phase_secs["synth"] += t1 - t0
    run.phase_secs["prove"] += t2 - t1


def run_side_by_side(
    kinds: list[str], sectors: list[str], metas: dict[str, Any], profile: str
) -> SequentialRun:
    """Two processes, each proving every other partition one at a time as the 1-core prover does. Both
    warm up first and start together; the wall time runs from the first start to the last end."""
    work = [
        (kind, sector, partition, n)
        for n, (kind, sector) in enumerate(zip(kinds, sectors, strict=True))
        for partition in range(_partitions(kind))
    ]
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2)
    results = context.Queue()
    halves = [
        context.Process(target=_prove_half, args=(work[i::2], metas, profile, barrier, results))
        for i in (0, 1)
    ]
    for process in halves:
        process.start()
    measured = [results.get(timeout=3600) for _ in halves]
    for process in halves:
        process.join()
    run = SequentialRun()
    run.wall_secs = max(end for _, end, _, _ in measured) - min(start for start, _, _, _ in measured)
    run.cpu_secs = sum(cpu for _, _, cpu, _ in measured)
    run.partitions = sum(count for _, _, _, count in measured)
    return run


def _prove_half(
    work: list[tuple[str, str, int, int]], metas: dict[str, Any], profile: str, barrier: Any, results: Any
) -> None:
    """In a process of its own: warm up, wait for the other half, prove ``work``, report the times
    (``perf_counter`` is the machine's monotonic clock, the same in both processes)."""
    for kind in sorted({kind for kind, *_ in work}):
        load_key(metas[kind].key_path, BASES, tables=True)
        sector = next(sector for k, sector, *_ in work if k == kind)
        _prove_one(kind, sector, 0, metas[kind], profile, SequentialRun())
    barrier.wait()
    run = SequentialRun()
    start, cpu = time.perf_counter(), time.process_time()
    for kind, sector, partition, job in work:
        _prove_one(kind, sector, partition, metas[kind], profile, run, job=job)
    results.put((start, time.perf_counter(), time.process_time() - cpu, run.partitions))


def _partitions(kind: str) -> int:
    from prooflane.kinds import kind_spec

    spec = kind_spec(kind)
    assert spec is not None
    return spec.partitions


# --- (d) the engine ---------------------------------------------------------------------------


class Watch:
    """Follows the daemon while the workload runs: steady-state busy time, peak memory, and how many of
    its CPU-heavy processes (provers, finalizers, synthesis) are runnable at each sample."""

    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        self.peak_rss = 0
        self.peak_pss = 0
        self.peak_reserved = 0
        self.budget = 0
        self.window: list[tuple[float, float]] = []  # (time, device busy seconds) while work waits
        self.devices = 1
        self.runnable: Counter[int] = Counter()  # CPU-heavy processes of the daemon runnable -> samples
        self.machine_runnable: Counter[int] = Counter()  # runnable tasks of the whole machine -> samples
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        tick = 0
        while not self._stop.wait(0.05):
            tick += 1
            processes = tree(self.process)
            self.runnable[sum(_state(p) == "R" and _role(p) in ROLES.values() for p in processes)] += 1
            self.machine_runnable[_machine_runnable()] += 1
            if tick % 2 == 0:
                self.peak_rss = max(self.peak_rss, tree_rss(processes))
            if tick % 20 == 0:
                self.peak_pss = max(self.peak_pss, tree_pss(processes))

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


def _state(process: psutil.Process) -> str:
    """The process's scheduler state from /proc (R: running or runnable)."""
    try:
        return Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "?"


def _role(process: psutil.Process, root: int | None = None) -> str:
    if process.pid == root:
        return "daemon"
    with contextlib.suppress(psutil.Error):
        return ROLES.get(process.name(), "other")
    return "other"


def _machine_runnable() -> int:
    """Tasks runnable on the whole machine now (the 4th field of /proc/loadavg), this sampler excluded."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        return max(0, int(Path("/proc/loadavg").read_text().split()[3].split("/")[0]) - 1)
    return 0


def usage_by_role(process: psutil.Process) -> dict[str, dict[str, float]]:
    """CPU seconds, context switches and minor page faults of the daemon's processes, by role."""
    usage: dict[str, dict[str, float]] = {}
    for p in tree(process):
        with contextlib.suppress(psutil.Error):
            times, switches = p.cpu_times(), p.num_ctx_switches()
            row = usage.setdefault(
                _role(p, process.pid),
                {"processes": 0, "cpu_secs": 0.0, "voluntary_switches": 0, "involuntary_switches": 0},
            )
            row["processes"] += 1
            row["cpu_secs"] += times.user + times.system
            row["voluntary_switches"] += switches.voluntary
            row["involuntary_switches"] += switches.involuntary
    return usage


def usage_delta(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]) -> dict[str, Any]:
    """What each role used between two readings (the engine's processes persist between them)."""
    out: dict[str, Any] = {}
    for role, row in after.items():
        old = before.get(role, {})
        out[role] = {k: v - old.get(k, 0) if k != "processes" else v for k, v in row.items()}
    return out


class PerfStat:
    """``perf stat`` attached to some processes for a while, when perf works on this machine."""

    def __init__(self) -> None:
        self.events = _perf_events()
        self._proc: subprocess.Popen[str] | None = None

    def start(self, pids: list[int]) -> None:
        if self.events is None or not pids:
            return
        command = ["perf", "stat", "-x", ",", "-e", self.events, "-p", ",".join(map(str, pids))]
        self._proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def stop(self) -> dict[str, Any]:
        if self._proc is None:
            return {"events": self.events, "counters": None}
        self._proc.send_signal(signal.SIGINT)
        _, err = self._proc.communicate(timeout=30)
        counters: dict[str, float | None] = {}
        for line in err.splitlines():
            fields = line.split(",")
            if len(fields) > 2 and fields[2]:
                with contextlib.suppress(ValueError):
                    counters[fields[2]] = float(fields[0])
                    continue
                counters[fields[2]] = None  # <not supported> / <not counted>
        return {"events": self.events, "counters": counters}


def _perf_events() -> str | None:
    """Hardware counters when ``perf stat`` can read them here, else software ones, else None."""
    for events in (HARDWARE_EVENTS, SOFTWARE_EVENTS):
        try:
            probe = subprocess.run(
                ["perf", "stat", "-x", ",", "-e", events, "true"], capture_output=True, text=True, timeout=30
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        if probe.returncode == 0 and "<not supported>" not in probe.stderr:
            return events
    return None


def warm_every_worker(client: Client, kinds: list[str], sectors: list[str], metas: dict[str, Any]) -> int:
    """Run warm-up jobs until every worker holds every kind's key (as /status ``allocations`` show), so
    no key is loaded while the workload is measured. Returns the rounds it took (at most 6)."""
    wanted = sorted(set(kinds))
    for round_ in range(1, 7):
        snapshot = client.status()
        workers = [w["worker_id"] for w in snapshot["workers"]]
        held = {a["name"] for a in snapshot["allocations"]}
        missing = [k for k in wanted if any(not _holds(held, metas[k].key_name, w) for w in workers)]
        if not missing and round_ > 1:
            return round_ - 1
        batch = [k for k in (missing or wanted) for _ in range(len(workers) if round_ > 1 else 1)]
        run_workload(client, batch, sectors=[sectors[kinds.index(k)] for k in batch])
    return 6


def _holds(held: set[str], key: str, worker: str) -> bool:
    return f"key:{key}@{worker}" in held or f"key+tables:{key}@{worker}" in held


def run_engine(
    data: Path,
    kinds: list[str],
    sectors: list[str],
    metas: dict[str, Any],
    profile: str,
    tmp: Path,
    config: Path | None,
) -> tuple[Any, dict[str, Any]]:
    with (
        DaemonProcess(data, profile=profile, config_file=config, log_path=tmp / "daemon.log") as daemon,
        Client(daemon.url) as client,
    ):
        rounds = warm_every_worker(client, kinds, sectors, metas)
        # msm_tables = "auto": the keys' tables built in the background after their first partition; the
        # steady state is measured (each worker maps them at its next partition of the key)
        tables = wait_for_tables(tmp / "daemon.log", sorted({metas[k].key_name for k in kinds}))
        print(f"engine: msm tables {tables}")
        rounds += warm_every_worker(client, kinds, sectors, metas)
        root = psutil.Process(daemon.pid)
        idle_rss, idle_pss = tree_rss(tree(root)), tree_pss(tree(root))
        idle_by_role: dict[str, int] = {}
        for p in tree(root):
            with contextlib.suppress(psutil.Error):
                role = _role(p, root.pid)
                idle_by_role[role] = idle_by_role.get(role, 0) + p.memory_info().rss
        watch = Watch(daemon.pid)
        perf = PerfStat()
        perf.start([p.pid for p in tree(root)])
        watch.start()
        before = usage_by_role(root)
        result = run_workload(client, kinds, sectors=sectors, on_sample=watch.sample)
        usage = usage_delta(before, usage_by_role(root))
        watch.stop()
        counters = perf.stop()
    cpu_secs = sum(row["cpu_secs"] for row in usage.values())
    samples = sum(watch.runnable.values()) or 1
    extra = {
        "warm_up_rounds": rounds,
        "msm_tables": tables,
        "cpu_secs": cpu_secs,
        "cpu_secs_per_partition": cpu_secs / max(1, result.partitions),
        "by_role": usage,
        "cpu_secs_per_partition_by_role": {
            role: row["cpu_secs"] / max(1, result.partitions) for role, row in usage.items()
        },
        "runnable_cpu_heavy_histogram": dict(sorted(watch.runnable.items())),
        "runnable_cpu_heavy_mean": sum(k * v for k, v in watch.runnable.items()) / samples,
        "runnable_cpu_heavy_max": max(watch.runnable, default=0),
        "machine_runnable_mean": sum(k * v for k, v in watch.machine_runnable.items())
        / (sum(watch.machine_runnable.values()) or 1),
        "perf_stat": counters,
        "idle_rss_bytes": idle_rss,
        "idle_pss_bytes": idle_pss,
        "idle_rss_bytes_by_role": idle_by_role,
        "peak_rss_bytes": max(watch.peak_rss, idle_rss),
        "peak_pss_bytes": max(watch.peak_pss, idle_pss),
        "peak_reserved_bytes": watch.peak_reserved,
        "budget_bytes": watch.budget,
        "steady_busy_fraction": watch.steady_busy_fraction(),
        "steady_window_secs": watch.window[-1][0] - watch.window[0][0] if len(watch.window) > 1 else 0.0,
    }
    return result, extra


# --- report -----------------------------------------------------------------------------------


def report(
    profile: str,
    kinds: list[str],
    seq: SequentialRun,
    two: SequentialRun,
    side: SequentialRun,
    engine: Any,
    extra: dict[str, Any],
    config: Path | None,
    loads: dict[str, tuple[float, float, float]],
) -> None:
    cores = psutil.cpu_count(logical=True) or 1
    cpu_per_partition = seq.cpu_secs / seq.partitions
    limit_per_hour = cores / cpu_per_partition * 3600
    seq_per_hour = seq.partitions / seq.wall_secs * 3600
    two_per_hour = two.partitions / two.wall_secs * 3600
    side_per_hour = side.partitions / side.wall_secs * 3600
    engine_per_hour = engine.partitions / engine.wall_secs * 3600
    engine_cpu = extra["cpu_secs_per_partition"]

    def row(run: SequentialRun) -> dict[str, Any]:
        return {
            "wall_secs": run.wall_secs,
            "cpu_secs": run.cpu_secs,
            "cpu_secs_per_partition": run.cpu_secs / run.partitions,
            "cpu_over_wall": run.cpu_secs / run.wall_secs,
            "proofs_per_hour": len(kinds) / run.wall_secs * 3600,
            "partitions_per_hour": run.partitions / run.wall_secs * 3600,
            "phase_secs_per_partition": {k: v / run.partitions for k, v in run.phase_secs.items()},
        }

    payload = {
        "profile": profile,
        "workload": {"jobs": len(kinds), "kinds": kinds, "partitions": seq.partitions},
        "engine_config": str(config) if config else None,
        "cores": cores,
        "load_average": loads,
        "sequential_niceness": "the engine's worker_niceness (the same priority as its proving processes)",
        "sequential": row(seq)
        | {"peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024},
        "two_cores": row(two),
        "side_by_side": row(side),
        "engine": engine.to_json() | extra,
        "peak_rss_within_budget_plus_idle": extra["peak_rss_bytes"]
        <= extra["budget_bytes"] + extra["idle_rss_bytes"],
        "ratio_vs_two_cores": engine_per_hour / two_per_hour,
        "ratio": engine_per_hour / seq_per_hour,
        "two_cores_ratio": two_per_hour / seq_per_hour,
        "ratio_vs_side_by_side": engine_per_hour / side_per_hour,
        "side_by_side_cpu_over_sequential": side.cpu_secs / side.partitions / cpu_per_partition,
        "engine_cpu_over_sequential": engine_cpu / cpu_per_partition,
        "cpu_limit_partitions_per_hour": limit_per_hour,
        "engine_share_of_cpu_limit": engine_per_hour / limit_per_hour,
    }
    print()
    print_table(
        ["prover", "wall s", "proofs/hour", "partitions/hour", "CPU s/partition"],
        [
            (
                name,
                f"{r.wall_secs:.1f}",
                f"{len(kinds) / r.wall_secs * 3600:.0f}",
                f"{per_hour:.0f}",
                f"{cpu:.3f}",
            )
            for name, r, per_hour, cpu in (
                ("sequential, 1 core", seq, seq_per_hour, cpu_per_partition),
                ("sequential, 2 cores", two, two_per_hour, two.cpu_secs / two.partitions),
                ("two 1-core provers side by side", side, side_per_hour, side.cpu_secs / side.partitions),
            )
        ]
        + [
            (
                "engine",
                f"{engine.wall_secs:.1f}",
                f"{engine.proofs_per_hour:.0f}",
                f"{engine_per_hour:.0f}",
                f"{engine_cpu:.3f}",
            )
        ],
    )
    print()
    busy = extra["steady_busy_fraction"]
    roles = extra["cpu_secs_per_partition_by_role"]
    switches = extra["by_role"]
    print_table(
        ["measure", "value"],
        [
            ("engine / 2-core prover", f"{payload['ratio_vs_two_cores']:.2f}x"),
            ("engine / 1-core prover", f"{payload['ratio']:.2f}x"),
            ("2-core / 1-core prover", f"{payload['two_cores_ratio']:.2f}x"),
            ("engine / two 1-core provers side by side", f"{payload['ratio_vs_side_by_side']:.2f}x"),
            (
                "side by side CPU / 1-core CPU per partition",
                f"{payload['side_by_side_cpu_over_sequential']:.3f}",
            ),
            ("engine share of CPU limit", f"{payload['engine_share_of_cpu_limit']:.1%}"),
            ("engine CPU / 1-core CPU per partition", f"{payload['engine_cpu_over_sequential']:.3f}"),
            (
                "engine CPU s/partition by role",
                ", ".join(f"{k} {v:.3f}" for k, v in sorted(roles.items())),
            ),
            (
                "involuntary switches/partition",
                ", ".join(
                    f"{k} {v['involuntary_switches'] / seq.partitions:.0f}"
                    for k, v in sorted(switches.items())
                ),
            ),
            (
                "CPU-heavy processes runnable",
                f"mean {extra['runnable_cpu_heavy_mean']:.2f}, max {extra['runnable_cpu_heavy_max']}, "
                f"machine-wide mean {extra['machine_runnable_mean']:.2f}",
            ),
            (
                "device busy, steady state",
                "n/a" if busy is None else f"{busy:.1%} over {extra['steady_window_secs']:.1f} s",
            ),
            ("device busy, whole run", f"{engine.device_busy_fraction:.1%}"),
            (
                "peak RSS / PSS (daemon tree)",
                f"{extra['peak_rss_bytes'] / 2**20:.0f} / {extra['peak_pss_bytes'] / 2**20:.0f} MiB "
                f"(idle {extra['idle_rss_bytes'] / 2**20:.0f} / {extra['idle_pss_bytes'] / 2**20:.0f} MiB)",
            ),
            (
                "peak reserved / budget",
                f"{extra['peak_reserved_bytes'] / 2**20:.1f} MiB / {extra['budget_bytes'] / 2**20:.0f} MiB",
            ),
            ("perf stat", _perf_line(extra["perf_stat"])),
            ("load average (start, end)", f"{loads['start']} -> {loads['after_engine']}"),
            ("failed jobs", str(engine.failed)),
        ],
    )
    write_json(f"bench_pipeline-{profile}", payload)


def _perf_line(perf: dict[str, Any]) -> str:
    counters = perf.get("counters")
    if not counters:
        return "perf not usable here"
    return ", ".join(f"{k} {v:.0f}" if v is not None else f"{k} n/a" for k, v in counters.items())


if __name__ == "__main__":
    with claim_cpu():
        main()
