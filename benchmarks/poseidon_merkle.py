"""A second circuit shape for bench_prove: Poseidon Merkle paths, compiled by circom from circomlib.

``PATHS`` Merkle paths of depth ``DEPTH`` (circomlib's ``Poseidon(2)`` per level, the left/right order
chosen by a path bit, each path's root a public output): about 61,000 constraints, a 2^16 domain like the
square chain's, but with a circom circuit's wiring (Poseidon's rounds, bits, many linear terms). Compiled
by circom2, the witness made by snarkjs from random inputs, the key a development key (``prooflane``'s
setup: enough to time a prover, never a production key). Cached under benchmarks/results/.

Usage: ``python benchmarks/poseidon_merkle.py`` prints the .zkey and .wtns paths; then
``python benchmarks/bench_prove.py --zkey ZKEY --wtns WTNS``.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import RESULTS
from prooflane.groth16 import BN128, read_r1cs, setup, write_zkey

ROOT = Path(__file__).resolve().parents[1]
CIRCOMLIB = ROOT / "node_modules" / "circomlib" / "circuits"
CIRCOM2 = ROOT / "node_modules" / ".bin" / "circom2"
SNARKJS = ROOT / "node_modules" / ".bin" / "snarkjs"
PATHS, DEPTH = 16, 16

CIRCUIT = """pragma circom 2.0.0;
include "circomlib/poseidon.circom";

template MerklePath(depth) {
    signal input leaf;
    signal input siblings[depth];
    signal input bits[depth];
    signal output root;
    signal node[depth + 1];
    signal left[depth];
    component hash[depth];
    node[0] <== leaf;
    for (var i = 0; i < depth; i++) {
        bits[i] * (bits[i] - 1) === 0;
        left[i] <== node[i] + bits[i] * (siblings[i] - node[i]);
        hash[i] = Poseidon(2);
        hash[i].inputs[0] <== left[i];
        hash[i].inputs[1] <== node[i] + siblings[i] - left[i];
        node[i + 1] <== hash[i].out;
    }
    root <== node[depth];
}

template Paths(n, depth) {
    signal input leaf[n];
    signal input siblings[n][depth];
    signal input bits[n][depth];
    signal output root[n];
    component path[n];
    for (var k = 0; k < n; k++) {
        path[k] = MerklePath(depth);
        path[k].leaf <== leaf[k];
        for (var i = 0; i < depth; i++) {
            path[k].siblings[i] <== siblings[k][i];
            path[k].bits[i] <== bits[k][i];
        }
        root[k] <== path[k].root;
    }
}

component main = Paths(%d, %d);
"""


def make(paths: int = PATHS, depth: int = DEPTH) -> tuple[Path, Path]:
    """(zkey, wtns) of ``paths`` paths of depth ``depth``, made once and cached."""
    folder = RESULTS / f"circom-poseidon-merkle-{paths}x{depth}"
    zkey, wtns = folder / "merkle.zkey", folder / "merkle.wtns"
    if zkey.exists() and wtns.exists():
        return zkey, wtns
    if not CIRCOM2.exists() or not SNARKJS.exists():
        raise SystemExit("circom2 or snarkjs is not installed: run `make setup` (it runs `npm ci`)")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    shutil.copytree(CIRCOMLIB, folder / "circomlib")  # circom2 sees only its folder and those below
    (folder / "merkle.circom").write_text(CIRCUIT % (paths, depth))
    started = time.perf_counter()
    subprocess.run(
        [str(CIRCOM2), "merkle.circom", "--r1cs", "--wasm", "--O2", "-o", "."], cwd=folder, check=True
    )
    rng = random.Random(20261201)
    inputs = {
        "leaf": [str(rng.randrange(BN128.r)) for _ in range(paths)],
        "siblings": [[str(rng.randrange(BN128.r)) for _ in range(depth)] for _ in range(paths)],
        "bits": [[str(rng.randrange(2)) for _ in range(depth)] for _ in range(paths)],
    }
    (folder / "input.json").write_text(json.dumps(inputs))
    wasm = folder / "merkle_js" / "merkle.wasm"
    subprocess.run(
        [str(SNARKJS), "wtns", "calculate", str(wasm), "input.json", wtns.name], cwd=folder, check=True
    )
    r1cs = read_r1cs(folder / "merkle.r1cs")
    took = time.perf_counter() - started
    print(f"compiled {r1cs.n_constraints} constraints, {r1cs.n_wires} wires ({took:.1f} s)")
    started = time.perf_counter()
    write_zkey(zkey, setup(r1cs, seed=b"poseidon merkle bench"))
    print(f"development key ({time.perf_counter() - started:.1f} s)")
    return zkey, wtns


if __name__ == "__main__":
    key, witness = make()
    print(key)
    print(witness)
