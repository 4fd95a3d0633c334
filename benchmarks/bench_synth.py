"""Synthesis time per partition of the storage circuits, with and without the cached constraint matrices.

For each profile and proof kind, one partition is synthesized (witness and A·w, B·w, C·w) two ways:

- cached: the circuit was compiled once (``storage_circuit``); a partition runs the witness hints and the
  sparse products over the cached matrices (``partition_synthesize``).
- uncached: the circuit function runs again, building every constraint and the matrices, then the same
  evaluation runs (``compile_storage_circuit`` then ``CompiledCircuit.synthesize``).
- for reference, ``groth16.synthesize(r1cs, witness)``: the prover's own generic evaluation of a ready
  R1CS (the witness hints included), which converts the matrices on every call.

Times are medians of wall and CPU seconds; the table shows CPU seconds, which stay meaningful on a
shared machine. Sectors are made once under benchmarks/results/sectors/ and reused. Prints a table; writes
benchmarks/results/bench_synth.json. Usage: ``python benchmarks/bench_synth.py [--profiles tiny,small,medium]
[--repeat N]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import RESULTS, print_table, write_json
from prooflane.circuits import (
    KINDS,
    PROFILES,
    Sector,
    partition_inputs,
    partition_synthesize,
    storage_circuit,
)
from prooflane.circuits.storage import compile_storage_circuit
from prooflane.errors import SectorError
from prooflane.groth16 import BN128, Witness, from_ints, synthesize

RANDOMNESS = b"bench-synth"


def _median_seconds(run: Callable[[], Any], repeat: int) -> tuple[float, float]:
    """Median wall and CPU seconds of ``repeat`` runs (CPU time is what to read on a shared machine)."""
    walls, cpus = [], []
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        run()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def _sector(profile: str) -> Sector:
    path = RESULTS / "sectors" / profile
    try:
        return Sector.open(path)
    except SectorError:
        started = time.perf_counter()
        sector = Sector.create(path, PROFILES[profile].sector_bytes, seed=f"bench-{profile}")
        print(f"made the {profile} sector in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        return sector


def _uncached(kind: str, profile: str, sector: Sector) -> None:
    circuit = compile_storage_circuit(kind, profile, BN128)  # the circuit function runs again
    circuit.synthesize(partition_inputs(kind, profile, sector, RANDOMNESS, 0, BN128))


def _generic(kind: str, profile: str, sector: Sector) -> None:
    circuit = storage_circuit(kind, profile, BN128)
    inputs = partition_inputs(kind, profile, sector, RANDOMNESS, 0, BN128)
    witness = Witness(BN128, from_ints(circuit.witness_values(inputs, check=False)))
    synthesize(circuit.r1cs, witness)


def measure(profile: str, kind: str, repeat: int) -> dict[str, Any]:
    """One row of the table: sizes, and median wall and CPU seconds of each way."""
    sector = _sector(profile)
    compile_s = _median_seconds(lambda: storage_circuit(kind, profile), 1)
    circuit = storage_circuit(kind, profile)
    inputs = partition_inputs(kind, profile, sector, RANDOMNESS, 0)
    timings = {
        "witness_hints": _median_seconds(lambda: circuit.witness_values(inputs, check=False), repeat),
        "cached": _median_seconds(lambda: partition_synthesize(kind, profile, sector, RANDOMNESS, 0), repeat),
        "uncached": _median_seconds(lambda: _uncached(kind, profile, sector), max(1, repeat // 2)),
        "groth16_synthesize": _median_seconds(lambda: _generic(kind, profile, sector), max(1, repeat // 2)),
    }
    r1cs = circuit.r1cs
    row: dict[str, Any] = {
        "profile": profile,
        "kind": kind,
        "constraints": circuit.n_constraints,
        "wires": circuit.n_wires,
        "nnz": r1cs.a.nnz + r1cs.b.nnz + r1cs.c.nnz,
        "compile_s": compile_s[0],
        "compile_cpu_s": compile_s[1],
    }
    for name, (wall, cpu) in timings.items():
        row[f"{name}_s"], row[f"{name}_cpu_s"] = wall, cpu
    row["speedup_cpu"] = row["uncached_cpu_s"] / row["cached_cpu_s"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--profiles", default="tiny,small,medium")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rows = []
    for profile in args.profiles.split(","):
        for kind in KINDS:
            rows.append(measure(profile, kind, args.repeat))
            print(f"measured {profile} {kind}", file=sys.stderr)
    headers = ["profile", "kind", "constraints", "nnz", "compile", "hints", "cached", "uncached", "x"]
    headers += ["groth16.synthesize", "cached wall"]
    keys = ["compile_cpu_s", "witness_hints_cpu_s", "cached_cpu_s", "uncached_cpu_s"]
    table = [
        [row["profile"], row["kind"], row["constraints"], row["nnz"]]
        + [row[k] for k in keys]
        + [f"{row['speedup_cpu']:.2f}", row["groth16_synthesize_cpu_s"], row["cached_s"]]
        for row in rows
    ]
    print("CPU seconds per partition (BN254); the last column is wall seconds")
    print_table(headers, table)
    write_json("bench_synth", {"curve": "bn128", "repeat": args.repeat, "rows": rows})


if __name__ == "__main__":
    main()
