"""A circomlib circuit under load: do the devices stay busy when a circom circuit's synthesis is slow?

A circom partition's synthesis runs the circuit's witness generator (its ``.wasm``) on the job's JSON
inputs, then multiplies the witness by the key's matrices; for circomlib's SHA-256 that costs a good part
of what its device section does, where a built-in kind's synthesis costs a tenth. This benchmark compiles
``Sha256(BITS)`` from circomlib with circom2 (cached under benchmarks/results/), makes a development key,
and for each layout starts a real `prooflane serve`, registers the circuit (.zkey and .wasm), warms every
worker (each holds the key), submits ``--jobs`` jobs of ``--witnesses`` JSON inputs each at once and
follows `/status` until all are done.

Reported per layout: partitions per hour, the device busy fraction in steady state (while partitions wait
for synthesis or a device; the figure that says whether devices starve) and over the whole run, the
synthesis slots `/status` showed (the most partitions the dispatcher let synthesize at once), the median
synthesis and device-section times, CPU seconds per partition by kind of process, and the load average
before and after. Layouts: ``before`` (one synthesis slot, ``synthesis_workers_max = 1``: the pool's size
before adaptive synthesis), ``default`` (the daemon's defaults), ``two`` (two synthesis processes from the
start), and ``four-before`` / ``four`` (four workers on the same cores, whose device sections outrun one
synthesis, as a GPU's would; one slot, then the defaults). Run it from another tree (PYTHONPATH) with
``--layouts default`` to compare with that tree's code. Writes benchmarks/results/bench_circom.json.
Asserts nothing.

Usage: python benchmarks/bench_circom.py [--bits 512] [--jobs 24] [--witnesses 1]
       [--layouts before,default] [--config engine.toml]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import RESULTS, claim_cpu, print_table, write_json
from bench_pipeline import Watch, usage_by_role, usage_delta
from prooflane.cli.daemon_process import DaemonProcess
from prooflane.client import Client
from prooflane.groth16 import read_r1cs, setup, write_zkey

ROOT = Path(__file__).resolve().parents[1]
CIRCOMLIB = ROOT / "node_modules" / "circomlib" / "circuits"
CIRCOM2 = ROOT / "node_modules" / ".bin" / "circom2"
LAYOUTS = {
    "before": "synthesis_workers = 1\nsynthesis_workers_max = 1\n",  # one synthesis at a time, as before
    "default": "",  # the daemon's defaults
    "two": "synthesis_workers = 2\n",  # two synthesis processes from the start
    # Four workers on the same cores: device sections that end sooner than synthesis can feed them (as a
    # GPU's do), before and with adaptive synthesis.
    "four-before": 'devices = ["cpu:0", "cpu:1", "cpu:2", "cpu:3"]\nsynthesis_workers_max = 1\n',
    "four": 'devices = ["cpu:0", "cpu:1", "cpu:2", "cpu:3"]\n',
}
POLL_SECS = 0.25
CIRCUIT = "sha256"


def main() -> None:
    args = _parse()
    circuit = compile_sha256(args.bits)
    layouts = [name.strip() for name in args.layouts.split(",") if name.strip()]
    for name in layouts:
        if name not in LAYOUTS:
            raise SystemExit(f"--layouts: unknown layout {name!r}: expected some of {', '.join(LAYOUTS)}")
    inputs: list[str | dict[str, Any]] = [_inputs(args.bits, n) for n in range(args.jobs * args.witnesses)]
    rows: list[dict[str, Any]] = []
    with claim_cpu():
        for name in layouts:
            rows.append(run_layout(name, circuit, inputs, args))
    report(rows, args, circuit)


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bits", type=int, default=512, help="input bits of Sha256(BITS) (default 512)")
    parser.add_argument("--jobs", type=int, default=24, help="jobs submitted at once (default 24)")
    parser.add_argument(
        "--witnesses", type=int, default=1, help="JSON inputs (partitions) per job (default 1)"
    )
    parser.add_argument(
        "--layouts",
        default="before,default",
        help=f"comma-separated, of {', '.join(LAYOUTS)} (default before,default)",
    )
    parser.add_argument(
        "--config", type=Path, help="a daemon config file (TOML) read before each layout's keys"
    )
    args = parser.parse_args()
    if args.bits < 1 or args.jobs < 1 or args.witnesses < 1:
        raise SystemExit("--bits, --jobs and --witnesses must be at least 1")
    return args


# --- the circuit ------------------------------------------------------------------------------------


def compile_sha256(bits: int) -> dict[str, Any]:
    """circomlib's ``Sha256(bits)`` compiled by circom2 and a development key, cached under results/."""
    folder = RESULTS / f"circom-sha256-{bits}"
    zkey, wasm, described = (
        folder / "sha256.zkey",
        folder / "sha256_js" / "sha256.wasm",
        folder / "circuit.json",
    )
    if described.exists() and zkey.exists() and wasm.exists():
        return {**json.loads(described.read_text()), "zkey": zkey, "wasm": wasm, "folder": folder}
    if not CIRCOM2.exists():
        raise SystemExit("circom2 is not installed: run `make setup` (it runs `npm ci`)")
    shutil.rmtree(folder, ignore_errors=True)  # an interrupted earlier compile
    folder.mkdir(parents=True)
    # circom2 (circom as WebAssembly) sees only the folder it runs in and the folders above it, by relative
    # paths: circomlib's sources are copied beside the circuit.
    shutil.copytree(CIRCOMLIB, folder / "circomlib")
    source = (
        f'pragma circom 2.0.0;\ninclude "circomlib/sha256/sha256.circom";\ncomponent main = Sha256({bits});\n'
    )
    (folder / "sha256.circom").write_text(source)
    started = time.perf_counter()
    done = subprocess.run(
        [str(CIRCOM2), "sha256.circom", "--r1cs", "--wasm", "-o", "."],
        cwd=folder, capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"circom2 failed:\n{done.stdout}\n{done.stderr}")
    compile_secs = time.perf_counter() - started
    r1cs = read_r1cs(folder / "sha256.r1cs")
    started = time.perf_counter()
    write_zkey(zkey, setup(r1cs, seed=hashlib.sha256(f"bench_circom:{bits}".encode()).digest()))
    meta = {
        "bits": bits,
        "constraints": r1cs.n_constraints,
        "wires": r1cs.n_wires,
        "compile_secs": compile_secs,
        "setup_secs": time.perf_counter() - started,
    }
    described.write_text(json.dumps(meta))
    return {**meta, "zkey": zkey, "wasm": wasm, "folder": folder}


def _inputs(bits: int, n: int) -> dict[str, Any]:
    """Job ``n``'s input: ``bits`` pseudo-random bits (different for every job, the same on every run)."""
    rng = random.Random(n)
    return {"in": [rng.randint(0, 1) for _ in range(bits)]}


# --- one layout ---------------------------------------------------------------------------------------


def run_layout(
    name: str, circuit: dict[str, Any], inputs: list[str | dict[str, Any]], args: argparse.Namespace
) -> dict[str, Any]:
    """Start a daemon with the layout's config, register the circuit, warm up, run the jobs, measure."""
    load_before = os.getloadavg()
    print(f"== {name}: {args.jobs} jobs of {args.witnesses} partitions, load average {_load()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="prooflane-bench-circom-") as tmp:
        data = Path(tmp) / "data"
        config = Path(tmp) / "prooflane.toml"
        base = args.config.read_text() if args.config else ""
        keys = RESULTS / "circom-keys"  # the built-in kinds' keys, made once (the daemon prepares them)
        roots = f'allowed_roots = ["{circuit["folder"]}"]\nkeys_dir = "{keys}"\n'
        config.write_text(base + roots + LAYOUTS[name])
        with (
            DaemonProcess(
                data, profile="tiny", config_file=config, log_path=Path(tmp) / "daemon.log"
            ) as daemon,
            Client(daemon.url, timeout=120) as client,
        ):
            client.register_circuit(CIRCUIT, circuit["zkey"], wasm=circuit["wasm"])
            workers = len(client.status()["workers"])
            warm_up(client, workers, circuit["bits"])
            root = psutil.Process(daemon.pid)
            watch = Watch(daemon.pid)
            watch.start()
            before = usage_by_role(root)
            result = run_jobs(client, inputs, args.witnesses, watch)
            usage = usage_delta(before, usage_by_role(root))
            watch.stop()
            processes = {role: int(row["processes"]) for role, row in usage_by_role(root).items()}
            result["peak_rss_bytes"] = watch.peak_rss
    partitions = max(1, result["partitions"])
    cpu = sum(row["cpu_secs"] for row in usage.values())
    return {
        "layout": name,
        "config": LAYOUTS[name] or "(defaults)",
        "workers": workers,
        **result,
        "steady_busy_fraction": watch.steady_busy_fraction(),
        "steady_window_secs": watch.window[-1][0] - watch.window[0][0] if len(watch.window) > 1 else 0.0,
        "cpu_secs_per_partition": cpu / partitions,
        "cpu_secs_per_partition_by_role": {role: row["cpu_secs"] / partitions for role, row in usage.items()},
        "processes_by_role": processes,
        "load_average": {"before": load_before, "after": os.getloadavg()},
    }


def warm_up(client: Client, workers: int, bits: int) -> None:
    """Prove a few partitions so every worker holds the circuit's key (as `/status` allocations show)."""
    for round_ in range(4):
        snapshot = client.status()
        held = {a["name"] for a in snapshot["allocations"]}
        ids = [w["worker_id"] for w in snapshot["workers"]]
        if round_ and all(f"key:circom:{CIRCUIT}@{w}" in held for w in ids):
            return
        jobs = [
            client.submit("circom", circuit=CIRCUIT, witnesses=[_inputs(bits, 10_000 + 100 * round_ + n)])
            for n in range(2 * workers)
        ]
        _wait(client, jobs)


def run_jobs(
    client: Client, inputs: list[str | dict[str, Any]], per_job: int, watch: Watch
) -> dict[str, Any]:
    """Submit every job at once and follow `/status` until all ended; what the run measured."""
    start = client.status()
    busy_start = _busy(start)
    devices = max(1, len(start["devices"]))
    started_at = time.time()
    ids = [
        client.submit("circom", circuit=CIRCUIT, witnesses=inputs[i : i + per_job])
        for i in range(0, len(inputs), per_job)
    ]
    slots = start["synthesis"]["max_concurrent"]
    synthesizing = 0
    timings: dict[tuple[str, int], dict[str, float]] = {}
    while True:
        time.sleep(POLL_SECS)
        snapshot = client.status()
        watch.sample(snapshot)
        slots = max(slots, snapshot["synthesis"]["max_concurrent"])
        synthesizing = max(synthesizing, snapshot["synthesis"]["active"])
        _timings(snapshot, timings, set(ids))
        views = {v.job_id: v for v in client.jobs(limit=len(ids) + 100)}
        if all(job_id in views and views[job_id].state.terminal for job_id in ids):
            break
    final = client.status()
    _timings(final, timings, set(ids))
    ended = [client.job(job_id) for job_id in ids]
    wall = max((v.finished_at or time.time()) for v in ended) - started_at
    partitions = sum(v.total_partitions for v in ended)
    return {
        "jobs": len(ids),
        "partitions": partitions,
        "failed": sum(v.state != "done" for v in ended),
        "errors": [f"{v.job_id}: {v.error}" for v in ended if v.error][:5],
        "wall_secs": wall,
        "partitions_per_hour": partitions * 3600 / wall if wall > 0 else 0.0,
        "device_busy_fraction": (_busy(final) - busy_start) / (wall * devices) if wall > 0 else 0.0,
        "synthesis_slots_max": slots,
        "synthesizing_max_seen": synthesizing,
        "synthesis_slots_at_end": final["synthesis"]["max_concurrent"],
        "phase_ms_p50": {
            phase: statistics.median(t[phase] for t in timings.values()) if timings else None
            for phase in ("synth_ms", "prove_ms", "finalize_ms")
        },
    }


def _busy(snapshot: dict[str, Any]) -> float:
    return float(sum(w.get("busy_seconds_total", 0.0) for w in snapshot["workers"]))


def _timings(snapshot: dict[str, Any], into: dict[tuple[str, int], dict[str, float]], jobs: set[str]) -> None:
    for pipeline in snapshot.get("pipelines", []):
        if pipeline["job_id"] in jobs:
            for part in pipeline.get("partitions", []):
                if part.get("state") == "done":
                    phases = ("synth_ms", "prove_ms", "finalize_ms")
                    into[(pipeline["job_id"], part["index"])] = {p: float(part.get(p) or 0.0) for p in phases}


def _wait(client: Client, ids: list[str]) -> None:
    while not all(client.job(job_id).state.terminal for job_id in ids):
        time.sleep(POLL_SECS)


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


# --- report -----------------------------------------------------------------------------------------


def report(rows: list[dict[str, Any]], args: argparse.Namespace, circuit: dict[str, Any]) -> None:
    print()
    print(
        f"Sha256({circuit['bits']}): {circuit['constraints']} constraints, {circuit['wires']} wires; "
        f"{args.jobs} jobs x {args.witnesses} partitions"
    )
    print_table(
        ["layout", "partitions/hour", "busy, steady", "busy, whole run", "synthesis slots", "synth ms p50",
         "prove ms p50", "CPU s/partition", "load before -> after", "failed"],
        [
            (
                row["layout"],
                f"{row['partitions_per_hour']:.0f}",
                "n/a" if row["steady_busy_fraction"] is None else f"{row['steady_busy_fraction']:.1%}",
                f"{row['device_busy_fraction']:.1%}",
                f"{row['synthesizing_max_seen']} of {row['synthesis_slots_max']}",
                _ms(row["phase_ms_p50"]["synth_ms"]),
                _ms(row["phase_ms_p50"]["prove_ms"]),
                f"{row['cpu_secs_per_partition']:.3f}",
                f"{row['load_average']['before'][0]:.2f} -> {row['load_average']['after'][0]:.2f}",
                str(row["failed"]),
            )
            for row in rows
        ],
    )  # fmt: skip
    for row in rows:
        roles = ", ".join(f"{k} {v:.3f}" for k, v in sorted(row["cpu_secs_per_partition_by_role"].items()))
        print(f"{row['layout']}: CPU s/partition by role: {roles}; processes: {row['processes_by_role']}")
        for error in row["errors"]:
            print(f"  {error}")
    circuit_json = {k: v for k, v in circuit.items() if k not in ("zkey", "wasm", "folder")}
    payload = {
        "circuit": circuit_json,
        "workload": {"jobs": args.jobs, "witnesses_per_job": args.witnesses},
        "cores": psutil.cpu_count(logical=True),
        "rows": rows,
    }
    write_json("bench_circom", payload)


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}"


if __name__ == "__main__":
    main()
