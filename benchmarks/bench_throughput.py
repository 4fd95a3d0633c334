"""The daemon against the simplest way to prove without it, on circom circuits, same inputs, one run.

Two circuits (``--circuit``, both by default):

- ``merkle``: bench_prove's Poseidon Merkle circuit (``poseidon_merkle.py``: ``--paths`` paths of depth
  ``--depth``, 16x16 by default, about 61,000 constraints, circomlib's Poseidon), with its development key;
- ``sha256``: circomlib's ``Sha256(--bits)`` (512 by default: 62,528 constraints, nearly every wire a bit),
  bench_circom's compile and development key.

``--inputs`` inputs of each are proved two ways, alternating:

(a) the naive pipeline a circom user would write: per input, ``snarkjs wtns calculate`` then rapidsnark's
    ``prover``, two inputs at a time (one per core); skipped, and said so, without rapidsnark's prover;
(b) one ``prooflane serve`` with its default config: the circuits registered by upload, a warm-up job of
    two inputs each, then a wait until the daemon says its key's fixed-base tables are stored (the default
    ``msm_tables = "auto"`` builds them in the background after a key's first partition: the table's
    "msm tables" line says what it found) and a job of four inputs so that every worker maps them; then one
    job of all the inputs as JSON (its witnesses computed in the daemon); from the submit to the last proof.

``--repeat`` rounds alternate the order; each row gives the median seconds, the spread and proofs per hour,
and the ratio is (a)'s median over (b)'s. Afterwards snarkjs verifies one proof of each way
(``snarkjs groth16 verify``), and the table says whether it did.

``--config FILE`` starts the daemon with that config instead (its row then names the file).

    python benchmarks/bench_throughput.py [--circuit merkle,sha256] [--inputs 12] [--repeat 2] [--config F]

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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import print_table, wait_for_tables, write_json
from bench_circom import _inputs as sha256_input
from bench_circom import compile_sha256
from bench_prove import rapidsnark_binary
from poseidon_merkle import DEPTH, PATHS, SNARKJS, make
from prooflane.cli.daemon_process import DaemonProcess
from prooflane.client import Client
from prooflane.groth16 import BN128

NAIVE = "naive: snarkjs wtns calculate + rapidsnark, 2 at a time"
DAEMON = "prooflane serve (default config)"


@dataclass(frozen=True)
class Circuit:
    """A circuit as both ways prove it: its registered name, a title, its files and its inputs."""

    name: str
    title: str
    zkey: Path
    wasm: Path
    inputs: Callable[[int], list[dict[str, Any]]]  # n -> n inputs (the same on every call)


def merkle(paths: int, depth: int) -> Circuit:
    zkey, _ = make(paths, depth)

    def inputs(n: int) -> list[dict[str, Any]]:
        rng = random.Random(n)
        return [
            {
                "leaf": [str(rng.randrange(BN128.r)) for _ in range(paths)],
                "siblings": [[str(rng.randrange(BN128.r)) for _ in range(depth)] for _ in range(paths)],
                "bits": [[str(rng.randrange(2)) for _ in range(depth)] for _ in range(paths)],
            }
            for _ in range(n)
        ]

    return Circuit(
        "merkle",
        f"Poseidon Merkle ({paths}x{depth})",
        zkey,
        zkey.parent / "merkle_js" / "merkle.wasm",
        inputs,
    )


def sha256(bits: int) -> Circuit:
    compiled = compile_sha256(bits)
    return Circuit(
        "sha256",
        f"SHA-256 ({bits} bits, {compiled['constraints']:,} constraints)",
        compiled["zkey"],
        compiled["wasm"],
        lambda n: [sha256_input(bits, 1000 * n + i) for i in range(n)],
    )


def naive(circuit: Circuit, inputs: list[dict[str, Any]], prover: Path, folder: Path) -> float:
    """Per input: snarkjs' witness, then rapidsnark; two at a time. Seconds for all."""
    zkey, wasm = circuit.zkey, circuit.wasm

    def one(i: int) -> None:
        base = folder / f"naive-{circuit.name}-{i}"
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


def daemon_run(client: Client, circuit: Circuit, inputs: list[dict[str, Any]], folder: Path) -> float:
    """One job of every input; seconds from the submit to its proof (the first partition's proof and public
    signals are written beside the naive ones, for snarkjs)."""
    started = time.perf_counter()
    job_id = client.submit("circom", circuit=circuit.name, witnesses=list[str | dict[str, Any]](inputs))
    found = client.proof(job_id, wait=3600)
    took = time.perf_counter() - started
    assert found is not None and len(found.partitions) == len(inputs), client.job(job_id)
    (folder / f"daemon-{circuit.name}-proof.json").write_text(json.dumps(found.partitions[0].proof))
    (folder / f"daemon-{circuit.name}-public.json").write_text(json.dumps(found.partitions[0].public))
    return took


def snarkjs_verifies(zkey: Path, proof: Path, public: Path, folder: Path) -> bool:
    """Whether ``snarkjs groth16 verify`` accepts the proof, against the key's verification key."""
    vk = folder / f"{zkey.stem}-vk.json"
    if not vk.exists():
        subprocess.run([str(SNARKJS), "zkey", "export", "verificationkey", str(zkey), str(vk)],
                       check=True, capture_output=True)  # fmt: skip
    done = subprocess.run([str(SNARKJS), "groth16", "verify", str(vk), str(public), str(proof)],
                          capture_output=True, text=True)  # fmt: skip
    return done.returncode == 0 and "OK" in done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--circuit", default="merkle,sha256", help="merkle, sha256 or both (comma-separated)")
    parser.add_argument("--inputs", type=int, default=12)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--paths", type=int, default=PATHS, help=f"merkle: paths (default {PATHS})")
    parser.add_argument("--depth", type=int, default=DEPTH, help=f"merkle: depth (default {DEPTH})")
    parser.add_argument("--bits", type=int, default=512, help="sha256: input bits (default 512)")
    parser.add_argument("--config", type=Path, help="a daemon config file (TOML) instead of the defaults")
    args = parser.parse_args()
    names = [n.strip() for n in args.circuit.split(",") if n.strip()]
    if not names or set(names) - {"merkle", "sha256"}:
        raise SystemExit("--circuit: merkle, sha256 or both")
    if args.inputs < 1 or args.repeat < 1:
        raise SystemExit("--inputs and --repeat must be at least 1")
    prover = rapidsnark_binary()
    if prover is None:
        print("no rapidsnark prover (../shared/peers/rapidsnark/prover or $RAPIDSNARK): no naive row")
    made = {"merkle": lambda: merkle(args.paths, args.depth), "sha256": lambda: sha256(args.bits)}
    circuits = [made[name]() for name in names]
    served = DAEMON if args.config is None else f"prooflane serve ({args.config.name})"
    ways = [NAIVE, served] if prover is not None else [served]
    times: dict[tuple[str, str], list[float]] = {(c.name, way): [] for c in circuits for way in ways}
    verified: dict[tuple[str, str], bool] = {}
    tables: dict[str, str] = {}  # circuit -> what the daemon said of its key's tables
    with tempfile.TemporaryDirectory(prefix="bench-throughput-") as tmp:
        folder = Path(tmp)
        daemon = DaemonProcess(
            folder / "data", profile=None, config_file=args.config, log_path=folder / "daemon.log"
        )
        daemon.start(timeout=600)
        try:
            with Client(daemon.url) as client:
                for circuit in circuits:
                    client.upload_circuit(circuit.name, circuit.zkey, wasm=circuit.wasm)
                for circuit in circuits:
                    inputs = circuit.inputs(args.inputs)
                    daemon_run(client, circuit, circuit.inputs(2), folder)  # warm-up: keys, generators
                    # msm_tables = "auto": the key's tables, built in the background after its first
                    # partition; the steady state is measured (each worker maps them at its next partition)
                    said = wait_for_tables(folder / "daemon.log", [f"circom:{circuit.name}"])
                    tables[circuit.name] = said[f"circom:{circuit.name}"]
                    print(f"{circuit.name}: msm tables {tables[circuit.name]}")
                    daemon_run(client, circuit, circuit.inputs(4), folder)  # every worker maps them
                    if prover is not None:
                        naive(circuit, circuit.inputs(1), prover, folder)  # warm-up: caches, node
                    for round_ in range(args.repeat):
                        for way in ways if round_ % 2 == 0 else list(reversed(ways)):
                            if way == NAIVE:
                                assert prover is not None
                                took = naive(circuit, inputs, prover, folder)
                            else:
                                took = daemon_run(client, circuit, inputs, folder)
                            times[(circuit.name, way)].append(took)
                    for way in ways:
                        tag = "naive" if way == NAIVE else "daemon"
                        suffix = "-0" if way == NAIVE else ""
                        verified[(circuit.name, way)] = snarkjs_verifies(
                            circuit.zkey,
                            folder / f"{tag}-{circuit.name}{suffix}-proof.json",
                            folder / f"{tag}-{circuit.name}{suffix}-public.json",
                            folder,
                        )
        finally:
            daemon.stop()
    rows, results = [], []
    for circuit in circuits:
        naive_secs = times.get((circuit.name, NAIVE))
        naive_median = statistics.median(naive_secs) if naive_secs else None
        for way in ways:
            secs = times[(circuit.name, way)]
            median = statistics.median(secs)
            ratio = f"{naive_median / median:.2f}x" if naive_median else "-"
            ok = verified[(circuit.name, way)]
            rows.append([circuit.title, way, f"{median:.2f}", f"{min(secs):.2f}-{max(secs):.2f}",
                         f"{args.inputs * 3600 / median:,.0f}", ratio, "yes" if ok else "NO"])  # fmt: skip
            results.append({"circuit": circuit.name, "title": circuit.title, "way": way,
                            "median_secs": median, "secs": secs, "snarkjs_verifies": ok,
                            "vs_naive": naive_median / median if naive_median else None})  # fmt: skip
    print(f"{args.inputs} proofs a circuit, {args.repeat} rounds alternating, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.2f}")  # fmt: skip
    print_table(
        ["circuit", "way", "median s", "spread s", "proofs / h", "vs naive", "snarkjs verifies"], rows
    )
    config = str(args.config) if args.config else None
    write_json(
        "bench_throughput",
        {
            "inputs": args.inputs,
            "repeat": args.repeat,
            "config": config,
            "msm_tables": tables,
            "results": results,
        },
    )


if __name__ == "__main__":
    main()
