"""Witness time per input on circomlib's ``Sha256(BITS)``: in this process by wasmtime (what the daemon
does), against snarkjs' calculator kept in a node process (the witness helper the daemon used before), and
against a fresh ``snarkjs wtns calculate`` per input (the shell loop a user would write), and the same in
a fresh Python process per input (its start and the generator's compile included, as the command's are).
The table's heading says how the generator multiplies (``WasmWitness.field_product``).

Each way computes the same ``--inputs`` random inputs, once to warm up and then ``--repeat`` rounds,
alternating the order; each row is the median time per input and the spread (min-max of the rounds), each
way's witness in the form it makes it (the prover's field vector, read back from a .wtns for snarkjs). The
witnesses are checked equal, wire for wire.

    python benchmarks/bench_witness.py [--bits 512] [--inputs 4] [--repeat 3]

Prints a table and writes benchmarks/results/bench_witness.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from _common import print_table, write_json
from bench_circom import ROOT, _inputs, compile_sha256
from prooflane.groth16 import read_wtns
from prooflane.groth16.field import FieldVector
from prooflane.kinds.wasm_witness import _CACHE, WasmWitness, compute_witness
from prooflane.kinds.witness_helper import _HELPER

SNARKJS = ROOT / "node_modules" / ".bin" / "snarkjs"


def in_process(wasm: str, values: dict[str, Any], folder: Path) -> FieldVector:
    return compute_witness(wasm, values)[1]


def first_in_process(wasm: str, values: dict[str, Any], folder: Path) -> FieldVector:
    """The first witness of a process that has imported prooflane: the engine, the module (from wasmtime's
    cache of compiled code), its instance, then the witness (what a new synthesis process pays once). The
    generator before is let go after the round, untimed, as a new process has none to free."""
    _RETIRED.extend(generator for _, generator in _CACHE.values())
    _CACHE.clear()
    return compute_witness(wasm, values)[1]


_RETIRED: list[WasmWitness] = []


_FRESH = (
    "import json, sys, numpy; from prooflane.kinds.wasm_witness import _CACHE, WasmWitness, compute_witness; "
    "numpy.save(sys.argv[3], compute_witness(sys.argv[1], json.load(open(sys.argv[2])))[1])"
)


def fresh_process(wasm: str, values: dict[str, Any], folder: Path) -> FieldVector:
    """A new Python process per input: its start, prooflane's import and the generator's compile
    included (the whole, as ``snarkjs wtns calculate`` is)."""
    import json
    import sys

    (folder / "fresh.json").write_text(json.dumps(values))
    out = folder / "fresh.npy"
    subprocess.run([sys.executable, "-c", _FRESH, wasm, str(folder / "fresh.json"), str(out)], check=True)
    vector: FieldVector = np.load(out)
    return vector


def node_helper(wasm: str, values: dict[str, Any], folder: Path) -> FieldVector:
    out = folder / "helper.wtns"
    _HELPER.calculate(wasm, values, str(out))
    return read_wtns(out).values


def snarkjs_cli(wasm: str, values: dict[str, Any], folder: Path) -> FieldVector:
    import json

    (folder / "input.json").write_text(json.dumps(values))
    out = folder / "cli.wtns"
    argv = [str(SNARKJS), "wtns", "calculate", wasm, str(folder / "input.json"), str(out)]
    subprocess.run(argv, check=True, capture_output=True)
    return read_wtns(out).values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bits", type=int, default=512)
    parser.add_argument("--inputs", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    circuit = compile_sha256(args.bits)
    wasm = str(circuit["wasm"])
    inputs = [_inputs(args.bits, n) for n in range(args.inputs)]
    ways: dict[str, Callable[[str, dict[str, Any], Path], FieldVector]] = {
        "in process (wasmtime)": in_process,
        "in process, its first witness (wasmtime)": first_in_process,
        "a fresh Python process per input (wasmtime)": fresh_process,
        "node helper (snarkjs' calculator, kept)": node_helper,
        "snarkjs wtns calculate per input": snarkjs_cli,
    }
    secs: dict[str, list[float]] = {name: [] for name in ways}
    with tempfile.TemporaryDirectory(prefix="bench-witness-") as tmp:
        folder = Path(tmp)
        reference = [in_process(wasm, v, folder) for v in inputs]
        for name, way in ways.items():  # warm up, and the same witnesses every way
            assert all(
                np.array_equal(way(wasm, v, folder), r) for v, r in zip(inputs, reference, strict=True)
            ), name
        for round_ in range(args.repeat):
            order = list(ways) if round_ % 2 == 0 else list(reversed(ways))
            for name in order:
                started = time.perf_counter()
                for values in inputs:
                    ways[name](wasm, values, folder)
                secs[name].append((time.perf_counter() - started) / len(inputs))
                _RETIRED.clear()
    _HELPER.stop()
    base = statistics.median(secs["snarkjs wtns calculate per input"])
    rows, results = [], []
    for name, got in secs.items():
        median = statistics.median(got)
        rows.append([name, f"{median * 1000:.1f}", f"{min(got) * 1000:.1f}-{max(got) * 1000:.1f}",
                     f"{base / median:.2f}x"])  # fmt: skip
        results.append({"way": name, "median_secs_per_input": median, "secs_per_input": got})
    product = WasmWitness(wasm).field_product
    print(f"Sha256({args.bits}): {circuit.get('constraints', '?')} constraints, {len(reference[0]):,} wires; "
          f"{args.inputs} inputs x {args.repeat} rounds; load {os.getloadavg()[0]:.2f}; "
          f"field product: {product}")  # fmt: skip
    print_table(["way", "median ms / input", "spread ms", "vs snarkjs CLI"], rows)
    write_json("bench_witness", {"bits": args.bits, "inputs": args.inputs, "field_product": product,
                                 "results": results})  # fmt: skip


if __name__ == "__main__":
    main()
