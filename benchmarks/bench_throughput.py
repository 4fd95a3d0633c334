"""The daemon against the simplest way to prove without it, on a circom circuit, same inputs, one run.

The circuit is bench_prove's Poseidon Merkle circuit (``poseidon_merkle.py``: 16 paths of depth 16, about
61,000 constraints, circomlib's Poseidon), with its development key. ``--inputs`` random inputs are proved:

(a) the naive pipeline a circom user would write: per input, ``snarkjs wtns calculate`` then rapidsnark's
    ``prover``, two inputs at a time (one per core);
(b) one ``prooflane serve`` with its default config: the circuit registered by upload, a warm-up job of
    two inputs, then one job of all the inputs as JSON (its witnesses computed in the daemon); from the
    submit to the last proof.

``--repeat`` rounds alternate the order; each row gives the median seconds, the spread and proofs per hour,
and the ratio is (a)'s median over (b)'s.

    python benchmarks/bench_throughput.py [--inputs 12] [--repeat 2]

Prints a table and writes benchmarks/results/bench_throughput.json.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import random
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import print_table, write_json
from bench_prove import rapidsnark_binary
from poseidon_merkle import DEPTH, PATHS, SNARKJS, make
from prooflane.cli.daemon_process import DaemonProcess
from prooflane.client import Client
from prooflane.groth16 import BN128


def inputs_for(n: int) -> list[dict[str, Any]]:
    rng = random.Random(n)
    return [
        {
            "leaf": [str(rng.randrange(BN128.r)) for _ in range(PATHS)],
            "siblings": [[str(rng.randrange(BN128.r)) for _ in range(DEPTH)] for _ in range(PATHS)],
            "bits": [[str(rng.randrange(2)) for _ in range(DEPTH)] for _ in range(PATHS)],
        }
        for _ in range(n)
    ]


def naive(zkey: Path, wasm: Path, inputs: list[dict[str, Any]], prover: Path, folder: Path) -> float:
    """Per input: snarkjs' witness, then rapidsnark; two at a time. Seconds for all."""

    def one(i: int) -> None:
        base = folder / f"naive-{i}"
        given, wtns = base.with_suffix(".json"), base.with_suffix(".wtns")
        given.write_text(json.dumps(inputs[i]))
        witness = [str(SNARKJS), "wtns", "calculate", str(wasm), str(given), str(wtns)]
        subprocess.run(witness, check=True, capture_output=True)
        proving = [str(prover), str(zkey), str(wtns), f"{base}-proof.json", f"{base}-public.json"]
        subprocess.run(proving, check=True, capture_output=True)

    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        list(pool.map(one, range(len(inputs))))
    return time.perf_counter() - started


def daemon_run(client: Client, inputs: list[dict[str, Any]]) -> float:
    """One job of every input; seconds from the submit to its proof."""
    started = time.perf_counter()
    job_id = client.submit("circom", circuit="merkle", witnesses=list[str | dict[str, Any]](inputs))
    found = client.proof(job_id, wait=3600)
    assert found is not None and len(found.partitions) == len(inputs), client.job(job_id)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=12)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    prover = rapidsnark_binary()
    if prover is None:
        raise SystemExit(
            "bench_throughput needs rapidsnark's prover (../shared/peers/rapidsnark/prover or $RAPIDSNARK)"
        )
    zkey, _ = make()
    wasm = zkey.parent / "merkle_js" / "merkle.wasm"
    inputs = inputs_for(args.inputs)
    times: dict[str, list[float]] = {"naive: snarkjs wtns calculate + rapidsnark, 2 at a time": [],
                                     "prooflane serve (default config)": []}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench-throughput-") as tmp:
        folder = Path(tmp)
        daemon = DaemonProcess(folder / "data", profile=None, log_path=folder / "daemon.log")
        daemon.start(timeout=600)
        try:
            with Client(daemon.url) as client:
                client.upload_circuit("merkle", zkey, wasm=wasm)
                daemon_run(client, inputs_for(2))  # warm-up: keys loaded, generators compiled
                naive(zkey, wasm, inputs_for(1), prover, folder)  # warm-up: caches, node
                for round_ in range(args.repeat):
                    for name in list(times) if round_ % 2 == 0 else list(reversed(times)):
                        if name.startswith("naive"):
                            times[name].append(naive(zkey, wasm, inputs, prover, folder))
                        else:
                            times[name].append(daemon_run(client, inputs))
        finally:
            daemon.stop()
    naive_median = statistics.median(next(iter(times.values())))
    rows, results = [], []
    for name, secs in times.items():
        median = statistics.median(secs)
        rows.append([name, f"{median:.2f}", f"{min(secs):.2f}-{max(secs):.2f}",
                     f"{len(inputs) * 3600 / median:,.0f}", f"{naive_median / median:.2f}x"])  # fmt: skip
        results.append({"way": name, "median_secs": median, "secs": secs})
    print(f"{len(inputs)} Poseidon Merkle proofs ({PATHS}x{DEPTH}), {args.repeat} rounds alternating, "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")  # fmt: skip
    print_table(["way", "median s", "spread s", "proofs / h", "vs naive"], rows)
    write_json("bench_throughput", {"inputs": len(inputs), "results": results})


if __name__ == "__main__":
    main()
