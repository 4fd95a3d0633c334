"""Synthesis time per partition of the storage circuits, with and without the cached constraint matrices.

For each profile and proof kind, one partition is synthesized (witness and A·w, B·w, C·w) two ways:

- cached: the circuit was compiled once (``storage_circuit``); a partition runs the witness hints and the
  sparse products over the cached matrices (``partition_synthesize``).
- uncached: the circuit function runs again, building every constraint and the matrices, then the same
  evaluation runs (``compile_storage_circuit`` then ``CompiledCircuit.synthesize``).
- for reference, ``groth16.synthesize(r1cs, witness)``: the prover's own generic evaluation of a ready
  R1CS (the witness hints included), which converts the matrices on every call.

Sectors are made once under benchmarks/results/sectors/ and reused. Prints a table; writes
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


def _median_seconds(run: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


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
    """One row of the table: sizes and median seconds of each way."""
    sector = _sector(profile)
    started = time.perf_counter()
    circuit = storage_circuit(kind, profile)
    compile_s = time.perf_counter() - started
    inputs = partition_inputs(kind, profile, sector, RANDOMNESS, 0)
    witness_s = _median_seconds(lambda: circuit.witness_values(inputs, check=False), repeat)
    cached_s = _median_seconds(lambda: partition_synthesize(kind, profile, sector, RANDOMNESS, 0), repeat)
    uncached_s = _median_seconds(lambda: _uncached(kind, profile, sector), max(1, repeat // 2))
    generic_s = _median_seconds(lambda: _generic(kind, profile, sector), max(1, repeat // 2))
    r1cs = circuit.r1cs
    return {
        "profile": profile,
        "kind": kind,
        "constraints": circuit.n_constraints,
        "wires": circuit.n_wires,
        "nnz": r1cs.a.nnz + r1cs.b.nnz + r1cs.c.nnz,
        "compile_s": compile_s,
        "witness_hints_s": witness_s,
        "cached_s": cached_s,
        "uncached_s": uncached_s,
        "groth16_synthesize_s": generic_s,
        "speedup": uncached_s / cached_s,
    }


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
    headers = ["profile", "kind", "constraints", "nnz", "compile s", "hints s", "cached s", "uncached s", "x"]
    headers.append("groth16.synthesize s")
    keys = ["profile", "kind", "constraints", "nnz", "compile_s", "witness_hints_s", "cached_s", "uncached_s"]
    table = [[row[k] for k in keys] + [f"{row['speedup']:.2f}", row["groth16_synthesize_s"]] for row in rows]
    print_table(headers, table)
    write_json("bench_synth", {"curve": "bn128", "repeat": args.repeat, "rows": rows})


if __name__ == "__main__":
    main()
