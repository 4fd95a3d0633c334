"""bench_pipeline's circom rows (``--circuit merkle`` or ``--circuit sha256``): the engine against the plain
layouts of the same two cores, on a stream of circom inputs whose witnesses are computed as part of the
work.

The circuits are bench_throughput's (circomlib's Poseidon in a Merkle circuit, or circomlib's SHA-256), with
their development keys. Each row proves the same ``--inputs`` inputs; every proof is verified:

(a) 1 core: this process, one input at a time: the witness by the circuit's ``.wasm`` in this process (the
    engine's own generator, wasmtime), synthesis, ``prove_start`` and ``prove_finish`` on one thread, verify;
(b) 2 cores: the same with ``prove(..., threads=2)``;
(c) two 1-core provers side by side: two processes, each doing (a) for every other input;
(d) the engine: one ``prooflane serve`` (its default config, or ``--config``), the circuit registered by
    upload, one job of every input as JSON, from the submit to the last proof.

The daemon starts first and every way is warmed up (the key loaded by every worker, the generator compiled);
then ``--repeat`` rounds run the four ways in turn, the order reversed every other round. A way's figure is
its median wall time; CPU is per proof (this process's, the side-by-side processes', and the engine's by
kind of process). The plain rows run at the engine's worker niceness.

Writes benchmarks/results/bench_pipeline-circom-<circuit>.json.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from _common import print_table, write_json
from bench_pipeline import niced, usage_by_role, usage_delta
from bench_throughput import Circuit, daemon_run, merkle, sha256
from prooflane.cli.daemon_process import DaemonProcess
from prooflane.client import Client
from prooflane.config import Config
from prooflane.devices.keys import load_key
from prooflane.groth16 import (
    Witness,
    curve_by_prime,
    preload,
    prove,
    prove_finish,
    prove_start,
    synthesize,
    verify,
)
from prooflane.kinds.wasm_witness import compute_witness

ONE = "sequential, 1 core"
TWO = "sequential, 2 cores"
SIDE = "two 1-core provers side by side"
ENGINE = "engine (prooflane serve)"
WAYS = (ONE, TWO, SIDE, ENGINE)


def circuit_for(name: str, paths: int, depth: int, bits: int) -> Circuit:
    if name == "merkle":
        return merkle(paths, depth)
    if name == "sha256":
        return sha256(bits)
    raise SystemExit("--circuit: merkle or sha256")


def prove_input(zkey: Path, wasm: Path, values: dict[str, Any], threads: int) -> None:
    """One input as a plain prover does it: witness, synthesis, prove on ``threads`` threads, verify."""
    prime, wires = compute_witness(str(wasm), values)
    witness = Witness(curve_by_prime(prime), wires)
    key = load_key(str(zkey))
    synthesized = synthesize(key, witness)
    if threads == 1:
        proof = prove_finish(prove_start(key, synthesized, threads=1), threads=1)
    else:
        proof = prove(key, synthesized, threads=threads)
    if not verify(key.verification_key, proof.public, proof):
        raise SystemExit(f"a {threads}-thread proof of {zkey.name} did not verify")
    proof.to_json()


def sequential(circuit: Circuit, inputs: list[dict[str, Any]], threads: int) -> tuple[float, float]:
    """(wall, CPU) seconds of every input proved here, one after another."""
    wall, cpu = time.perf_counter(), time.process_time()
    for values in inputs:
        prove_input(circuit.zkey, circuit.wasm, values, threads)
    return time.perf_counter() - wall, time.process_time() - cpu


def _half(
    zkey: Path, wasm: Path, inputs: list[dict[str, Any]], warm: dict[str, Any], go: Any, out: Any
) -> None:
    """In a process of its own: warm up, say so, then at each word from ``go`` prove ``inputs`` on one thread
    each and report the times (``perf_counter`` is the machine's monotonic clock, the same in both)."""
    preload(load_key(str(zkey)))
    prove_input(zkey, wasm, warm, 1)
    out.put("ready")
    while True:
        job = go.get()
        if job is None:
            return
        start, cpu = time.perf_counter(), time.process_time()
        for values in inputs:
            prove_input(zkey, wasm, values, 1)
        out.put((start, time.perf_counter(), time.process_time() - cpu))


class SideBySide:
    """Two processes, each proving every other input; kept between rounds, so each round is warm."""

    def __init__(self, circuit: Circuit, inputs: list[dict[str, Any]], warm: dict[str, Any]) -> None:
        context = multiprocessing.get_context("spawn")
        self.go = [context.Queue() for _ in (0, 1)]
        self.out = context.Queue()
        self.processes = [
            context.Process(
                target=_half, args=(circuit.zkey, circuit.wasm, inputs[i::2], warm, self.go[i], self.out)
            )
            for i in (0, 1)
        ]
        for process in self.processes:
            process.start()
        for _ in self.processes:  # both warm before any way is measured
            if self.out.get(timeout=600) != "ready":
                raise SystemExit("a side-by-side prover did not warm up")

    def run(self) -> tuple[float, float]:
        for queue in self.go:
            queue.put(True)
        measured = [self.out.get(timeout=3600) for _ in self.processes]
        wall = max(end for _, end, _ in measured) - min(start for start, _, _ in measured)
        return wall, sum(cpu for _, _, cpu in measured)

    def close(self) -> None:
        for queue in self.go:
            queue.put(None)
        for process in self.processes:
            process.join(timeout=60)


def run(circuit_name: str, n_inputs: int, repeat: int, paths: int, depth: int, bits: int,
        config: Path | None) -> None:  # fmt: skip
    circuit = circuit_for(circuit_name, paths, depth, bits)
    inputs, warm = circuit.inputs(n_inputs), circuit.inputs(1)[0]
    niceness = Config.load(config).worker_niceness
    print(f"== circom: {circuit.title}, {n_inputs} inputs, {repeat} rounds, load {_load()}", flush=True)
    walls: dict[str, list[float]] = {way: [] for way in WAYS}
    cpus: dict[str, list[float]] = {way: [] for way in WAYS}
    roles: list[dict[str, Any]] = []
    loads = {"start": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="bench-pipeline-circom-") as tmp:
        folder = Path(tmp)
        log = folder / "daemon.log"
        daemon = DaemonProcess(folder / "data", profile=None, config_file=config, log_path=log)
        daemon.start(timeout=600)
        side: SideBySide | None = None
        try:
            with Client(daemon.url) as client:
                client.upload_circuit(circuit.name, circuit.zkey, wasm=circuit.wasm)
                workers = len(client.status()["workers"])
                for _ in range(2):  # every worker's key loaded, every synthesis process's generator compiled
                    daemon_run(client, circuit, circuit.inputs(2 * max(1, workers)), folder)
                root = psutil.Process(daemon.pid)
                with niced(niceness):
                    preload(load_key(str(circuit.zkey)))
                    for threads in (1, 2):
                        prove_input(circuit.zkey, circuit.wasm, warm, threads)
                    side = SideBySide(circuit, inputs, warm)
                    for round_ in range(repeat):
                        for way in WAYS if round_ % 2 == 0 else tuple(reversed(WAYS)):
                            quiet(root)
                            if way == ENGINE:
                                before = usage_by_role(root)
                                wall = daemon_run(client, circuit, inputs, folder)
                                usage = usage_delta(before, usage_by_role(root))
                                cpu = sum(row["cpu_secs"] for row in usage.values())
                                roles.append({role: row["cpu_secs"] for role, row in usage.items()})
                            elif way == SIDE:
                                wall, cpu = side.run()
                            else:
                                wall, cpu = sequential(circuit, inputs, 1 if way == ONE else 2)
                            walls[way].append(wall)
                            cpus[way].append(cpu)
        finally:
            if side is not None:
                side.close()
            daemon.stop()
    loads["end"] = os.getloadavg()
    report(circuit, n_inputs, repeat, walls, cpus, roles, loads, config)


def report(circuit: Circuit, n_inputs: int, repeat: int, walls: dict[str, list[float]],
           cpus: dict[str, list[float]], roles: list[dict[str, Any]], loads: dict[str, Any],
           config: Path | None) -> None:  # fmt: skip
    median = {way: statistics.median(walls[way]) for way in WAYS}
    cpu = {way: statistics.median(cpus[way]) / n_inputs for way in WAYS}
    rows, results = [], []
    for way in WAYS:
        rows.append([way, f"{median[way]:.2f}", f"{min(walls[way]):.2f}-{max(walls[way]):.2f}",
                     f"{n_inputs * 3600 / median[way]:,.0f}", f"{cpu[way]:.3f}",
                     f"{median[way] / median[ENGINE]:.2f}x"])  # fmt: skip
        results.append({"way": way, "median_secs": median[way], "secs": walls[way], "cpu_secs": cpus[way],
                        "cpu_secs_per_proof": cpu[way],
                        "proofs_per_hour": n_inputs * 3600 / median[way]})  # fmt: skip
    by_role = {role: statistics.median(r.get(role, 0.0) for r in roles) / n_inputs for role in roles[0]}
    print(f"{circuit.title}: {n_inputs} proofs, {repeat} rounds alternating, {os.cpu_count()} cores, "
          f"load {loads['start'][0]:.2f} -> {loads['end'][0]:.2f}")  # fmt: skip
    print_table(["way", "median s", "spread s", "proofs / h", "CPU s / proof", "engine x"], rows)
    print("engine CPU s / proof by kind of process: "
          + ", ".join(f"{role} {secs:.3f}" for role, secs in sorted(by_role.items())))  # fmt: skip
    write_json(
        f"bench_pipeline-circom-{circuit.name}",
        {
            "circuit": circuit.name,
            "title": circuit.title,
            "inputs": n_inputs,
            "repeat": repeat,
            "engine_config": str(config) if config else None,
            "load_average": loads,
            "results": results,
            "engine_cpu_secs_per_proof_by_role": by_role,
            "engine_vs_two_cores": median[TWO] / median[ENGINE],
            "engine_vs_side_by_side": median[SIDE] / median[ENGINE],
            "engine_vs_one_core": median[ONE] / median[ENGINE],
        },
    )


def quiet(root: psutil.Process, timeout: float = 30.0) -> None:
    """Wait (up to ``timeout``) until the daemon's processes use under a tenth of a core over a fifth of a
    second: what one way leaves behind (a journal write, a worker's last message) is not another's cost."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        before = _tree_cpu(root)
        time.sleep(0.2)
        if _tree_cpu(root) - before < 0.02:
            return


def _tree_cpu(root: psutil.Process) -> float:
    return sum(row["cpu_secs"] for row in usage_by_role(root).values())


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())
