"""Prove time on one ~2^16-constraint circuit per curve, with snarkjs and groth16py on the same files.

BN254: the shared square-chain key and witness (../shared/bench/square_chain-65000-bn128) when present
and --constraints is 65,000 (the default), else a square chain of --constraints with a development key.
BLS12-381: a square chain of --constraints with a development key (made once, cached under
benchmarks/results/). For each:

- whole processes, cold, as a user runs them, in turns (one of each per round, each round's order rotated):
  `prooflane prove` (its own --json timings too), the same with the key's fixed-base tables stored
  (``--msm-tables`` run once beforehand, its time reported: a later process maps them; every other
  prooflane row runs with none stored), the same with ``PROOFLANE_NATIVE=0`` (the libraries'
  path, where the C extension is not built), `prooflane prove` with an empty memory of checked points (a
  key never seen before: every check runs), `snarkjs groth16 prove`, rapidsnark's standalone prover (BN254,
  when ../shared/peers/rapidsnark/prover or $RAPIDSNARK is an executable; its first run is reported apart as
  "cold", the rest as "warm": it has no in-process mode) and groth16py (BN254, when installed: a fresh
  interpreter that imports the .zkey and proves the .wtns); wall and CPU seconds, each run's kept for the
  spread; and a fresh process that only reads the key and builds all its library points (the key load);
- in this process: key read, cold load of the library points (both processes of the two-core path, side
  by side), synthesize, prove_start and prove_finish (one process, warm), prove with two processes (warm),
  verify, peak RSS;
- by kernel (``kernels.py``): the NTT block, each G1 MSM and the G2 MSM, and the fixed rest, wall and CPU,
  for prooflane (in this process, two threads) and rapidsnark (one process under ``perf record``, BN254),
  beside gnark-crypto's published 2-vCPU figures at 2^16. ``--kernels-only`` runs only this table (at
  2^20: ``--constraints 1040000 --curves bn128 --kernels-only``).

Medians of --repeat runs. Prints a table; writes benchmarks/results/bench_prove-<curves>.json.
Usage: ``python benchmarks/bench_prove.py [--repeat N] [--curves bn128,bls12381] [--constraints N]``, or
``--zkey K --wtns W`` for one circuit of one's own (results in bench_prove-<zkey name>.json).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import RESULTS, claim_cpu, print_table, write_json
from kernels import HEADERS as KERNEL_HEADERS
from kernels import NOTE as KERNEL_NOTE
from kernels import prooflane_kernels, rapidsnark_kernels
from kernels import table as kernel_table
from prooflane.groth16 import (
    R1CS,
    Curve,
    Proof,
    SparseMatrix,
    Witness,
    curve_by_name,
    from_ints,
    preload,
    prove,
    prove_finish,
    prove_start,
    read_wtns,
    read_zkey,
    setup,
    synthesize,
    verify,
    write_r1cs,
    write_wtns,
    write_zkey,
)

ROOT = Path(__file__).resolve().parent.parent
SHARED_CONSTRAINTS = 65000
SHARED = ROOT.parent / "shared" / "bench" / f"square_chain-{SHARED_CONSTRAINTS}-bn128"
SNARKJS = ROOT / "node_modules" / ".bin" / "snarkjs"
SHARED_RAPIDSNARK = ROOT.parent / "shared" / "peers" / "rapidsnark" / "prover"
PROOFLANE = Path(sys.executable).parent / "prooflane"

# A fresh interpreter that reads a key and builds all its library points in one process.
KEY_LOAD = """
import json, sys, time
start = time.perf_counter()
from prooflane.groth16 import arithmetics, preload, read_zkey
imported = time.perf_counter()
key = read_zkey(sys.argv[1])
read = time.perf_counter()
preload(key)
done = time.perf_counter()
print(json.dumps({"import_s": imported - start, "read_s": read - imported, "build_s": done - read,
                  "arithmetic": arithmetics()[key.curve.name]}))
"""
# groth16py's whole process: import the .zkey, prove the .wtns (GPL-3.0: run, never imported here).
GROTH16PY = """
import sys, groth16py
imported = groth16py.import_zkey(sys.argv[1])
pk = imported[0] if isinstance(imported, tuple) else imported
groth16py.prove_wtns(pk, sys.argv[2])
"""


def rapidsnark_binary() -> Path | None:
    """rapidsnark's prover: ``$RAPIDSNARK`` when set (empty: none), else the shared peer; None when it is not
    an executable file."""
    configured = os.environ.get("RAPIDSNARK")
    path = SHARED_RAPIDSNARK if configured is None else Path(configured) if configured else None
    return path if path is not None and path.is_file() and os.access(path, os.X_OK) else None


def square_chain(curve: Curve, n: int, x: int = 3, y: int = 5) -> tuple[R1CS, Witness]:
    """``s[i+1] = s[i]^2 + y`` (y public, the last value a public output): wires 0 one, 1 out, 2 y, 3 x,
    4.. s[1..n]; the last constraint is ``out = s[n] * 1``."""
    r, s = curve.r, [x]
    for _ in range(n):
        s.append((s[-1] * s[-1] + y) % r)
    values = [1, s[n], y, x, *s[1:]]
    a_rows = list(range(n + 1))
    a_cols = [3, *range(4, 4 + n)]
    b_cols = [3, *range(4, 3 + n), 0]
    c_rows = [i for i in range(n) for _ in (0, 1)] + [n]
    c_cols = [c for i in range(n) for c in (4 + i, 2)] + [1]
    c_vals = [v for _ in range(n) for v in (1, r - 1)] + [1]

    def matrix(rows: list[int], cols: list[int], vals: list[int]) -> SparseMatrix:
        return SparseMatrix(np.array(rows, np.int64), np.array(cols, np.int64), from_ints(vals))

    ones = [1] * (n + 1)
    a, b = matrix(a_rows, a_cols, ones), matrix(a_rows, b_cols, ones)
    return R1CS(
        curve, len(values), 1, 1, 1, n + 1, a, b, matrix(c_rows, c_cols, c_vals), len(values)
    ), Witness(curve, from_ints(values))


def inputs(curve: Curve, constraints: int, given: tuple[Path, Path] | None = None) -> tuple[Path, Path, str]:
    """(zkey, wtns, where they came from): ``given`` (--zkey, --wtns), else made and cached when needed."""
    if given is not None:
        return given[0], given[1], f"{given[0].parent.name}/{given[0].name}"
    if (
        curve.name == "bn128"
        and constraints == SHARED_CONSTRAINTS
        and (SHARED / "circuit_final.zkey").exists()
    ):
        return (
            SHARED / "circuit_final.zkey",
            SHARED / "witness.wtns",
            "shared square_chain (snarkjs ceremony key)",
        )
    folder = RESULTS / f"square_chain-{constraints}-{curve.name}"
    zkey, wtns = folder / "circuit.zkey", folder / "witness.wtns"
    if not zkey.exists():
        folder.mkdir(parents=True, exist_ok=True)
        r1cs, witness = square_chain(curve, constraints - 1)
        start = time.perf_counter()
        key = setup(r1cs, seed=b"bench_prove")
        print(f"dev setup of {curve.name} ({constraints} constraints): {time.perf_counter() - start:.1f} s")
        write_r1cs(folder / "circuit.r1cs", r1cs)
        write_wtns(wtns, witness)
        write_zkey(zkey, key)
    return zkey, wtns, "square_chain with a development key"


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def median(repeat: int, fn: Callable[[], Any]) -> float:
    return statistics.median(timed(fn)[0] for _ in range(repeat))


def run(cmd: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)


def timed_process(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the process and the children it waited for, its stdout)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = run(cmd, env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall, cpu, done.stdout


def verifies(zkey: Path, proof: Path, public: Path) -> bool:
    """Whether the proof.json and public.json a peer wrote verify against ``zkey`` here."""
    vk = read_zkey(zkey).verification_key
    values = tuple(int(v) for v in json.loads(public.read_text()))
    return verify(vk, values, Proof.from_json(json.loads(proof.read_text()), curve=vk.curve, public=values))


def whole_processes(zkey: Path, wtns: Path, curve: Curve, repeat: int) -> dict[str, Any]:
    """Cold whole-process times of prooflane's CLI, snarkjs and groth16py, taken in turns (one of each per
    round, so that other load on the machine falls on all of them alike), and of a fresh key load."""
    proof, public = RESULTS / "proof.json", RESULTS / "public.json"
    cli = [str(PROOFLANE), "prove", str(zkey), str(wtns), "--proof", str(proof), "--public", str(public)]
    provers = {
        "cli": [*cli, "--json"],
        "cli_tables": [*cli, "--json"],
        "cli_unseen": cli,
        "cli_libraries": cli,
    }
    if SNARKJS.exists():
        provers["snarkjs"] = [str(SNARKJS), "groth16", "prove", str(zkey), str(wtns), str(proof), str(public)]
    rapidsnark = rapidsnark_binary()
    if curve.name == "bn128" and rapidsnark is not None:
        provers["rapidsnark"] = [str(rapidsnark), str(zkey), str(wtns), str(proof), str(public)]
    if curve.name == "bn128" and importlib.util.find_spec("groth16py") is not None:
        provers["groth16py"] = [sys.executable, "-c", GROTH16PY, str(zkey), str(wtns)]
    out: dict[str, Any] = {}
    runs: dict[str, list[tuple[float, float, str]]] = {name: [] for name in provers}
    stored = tempfile.TemporaryDirectory(prefix="prooflane-msm-tables-")  # the tables row's, built once here
    plain = dict(os.environ, PROOFLANE_TABLES="")  # every other prooflane row: no stored tables
    tables = dict(os.environ, PROOFLANE_TABLES=stored.name)
    build_began = time.perf_counter()
    run([*cli, "--msm-tables"], tables)
    out["tables_build_s"] = time.perf_counter() - build_began
    out["tables_disk_mib"] = sum(f.stat().st_size for f in Path(stored.name).iterdir()) / 2**20
    if "rapidsnark" in provers:  # its cold run, first
        runs["rapidsnark"].append(timed_process(provers["rapidsnark"]))
    order = list(provers)
    for round_ in range(repeat):
        for name in order[round_ % len(order) :] + order[: round_ % len(order)]:  # each round rotated
            cmd = provers[name]
            if name == "cli_unseen":  # a key never seen before: an empty memory of checked points
                with tempfile.TemporaryDirectory(prefix="prooflane-point-checks-") as unseen:
                    runs[name].append(timed_process(cmd, dict(plain, PROOFLANE_POINT_CHECKS=unseen)))
            elif name == "cli_libraries":  # without the C extension: the libraries' path
                runs[name].append(timed_process(cmd, dict(plain, PROOFLANE_NATIVE="0")))
            elif name == "cli_tables":  # the key's fixed-base tables stored (by a daemon, or --msm-tables)
                runs[name].append(timed_process(cmd, tables))
            else:
                runs[name].append(timed_process(cmd, plain if name == "cli" else None))
    stored.cleanup()
    used = json.loads(runs["cli_tables"][0][2])["msm_tables"]
    assert used and not json.loads(runs["cli"][0][2])["msm_tables"], "the tables row must map tables, cli not"
    if "rapidsnark" in runs:
        (cold_wall, cold_cpu, _), *warm = runs["rapidsnark"]
        out.update(rapidsnark_cold_s=cold_wall, rapidsnark_cold_cpu_s=cold_cpu)
        runs["rapidsnark"] = warm
        rapid_proof, rapid_public = RESULTS / "rapidsnark-proof.json", RESULTS / "rapidsnark-public.json"
        run([*provers["rapidsnark"][:3], str(rapid_proof), str(rapid_public)])
        out["rapidsnark_proof_verifies"] = verifies(zkey, rapid_proof, rapid_public)
    out["prooflane_proof_verifies"] = verifies(zkey, proof, public)  # whichever prooflane ran last
    names = {
        "cli": "cli_cold",
        "cli_tables": "cli_tables",
        "cli_unseen": "cli_unseen_key",
        "rapidsnark": "rapidsnark_warm",
    }
    for name, results in runs.items():
        key = names.get(name, f"{name}_prove")
        out[f"{key}_s"] = statistics.median(r[0] for r in results)
        out[f"{key}_cpu_s"] = statistics.median(r[1] for r in results)
        out[f"{key}_runs_s"] = [round(r[0], 3) for r in results]
    middle = sorted(runs["cli"])[len(runs["cli"]) // 2]
    out["cli_cold_stages_s"] = json.loads(middle[2])["timings_s"]
    loads = [json.loads(run([sys.executable, "-c", KEY_LOAD, str(zkey)]).stdout) for _ in range(repeat)]
    for field in ("import_s", "read_s", "build_s"):
        out[f"fresh_key_{field}"] = statistics.median(load[field] for load in loads)
    out["fresh_key_load_s"] = statistics.median(load["read_s"] + load["build_s"] for load in loads)
    out["arithmetic"] = loads[0]["arithmetic"]
    return out


def by_kernel(zkey: Path, wtns: Path, key: Any, witness: Witness, repeat: int) -> dict[str, Any]:
    """The by-kernel figures of prooflane (two threads) and, on BN254, rapidsnark."""
    prover = rapidsnark_binary()
    peer = rapidsnark_kernels(prover, zkey, wtns) if prover and key.curve.name == "bn128" else None
    return {"prooflane": prooflane_kernels(key, witness, 2, repeat), "rapidsnark": peer}


def kernels_only(
    curve: Curve, constraints: int, repeat: int, given: tuple[Path, Path] | None
) -> dict[str, Any]:
    zkey_path, wtns_path, source = inputs(curve, constraints, given)
    key = read_zkey(zkey_path)
    return {
        "curve": curve.name,
        "source": source,
        "domain": key.domain_size,
        "kernels": by_kernel(zkey_path, wtns_path, key, read_wtns(wtns_path), repeat),
    }


def bench(
    curve: Curve, constraints: int, repeat: int, given: tuple[Path, Path] | None = None
) -> dict[str, Any]:
    zkey_path, wtns_path, source = inputs(curve, constraints, given)
    read_s, key = timed(lambda: read_zkey(zkey_path))
    witness = read_wtns(wtns_path)
    cold2_s, _ = timed(lambda: preload(key))
    row: dict[str, Any] = {"curve": curve.name, "source": source, "domain": key.domain_size}
    row["prove_2proc_cold_s"], proof = timed(lambda: prove(key, witness, threads=2))
    row["prove_2proc_s"] = median(repeat, lambda: prove(key, witness, threads=2))
    cold1_s = 0.0  # one load serves every thread count
    synthesized = synthesize(key, witness)
    row["synthesize_s"] = median(repeat, lambda: synthesize(key, witness))
    row["prove_start_s"] = median(repeat, lambda: prove_start(key, synthesized))
    state = prove_start(key, synthesized)
    row["prove_finish_s"] = median(repeat, lambda: prove_finish(state))
    vk = key.verification_key
    assert verify(vk, proof.public, proof)
    row["verify_s"] = median(repeat, lambda: verify(vk, proof.public, proof))
    row.update(read_zkey_s=read_s, load_cold_2proc_s=cold2_s, load_cold_1proc_extra_s=cold1_s)
    row.update(whole_processes(zkey_path, wtns_path, curve, repeat))
    row["kernels"] = by_kernel(zkey_path, wtns_path, key, witness, repeat)
    for peer in ("snarkjs_prove_s", "groth16py_prove_s", "rapidsnark_warm_s"):
        if row.get(peer):
            name = peer.removesuffix("_prove_s").removesuffix("_warm_s")
            row[f"{name}_ratio"] = row[peer] / row["prove_2proc_s"]
            row[f"{name}_cold_ratio"] = row[peer] / row["cli_cold_s"]
            row[f"{name}_tables_ratio"] = row[peer] / row["cli_tables_s"]
    if row.get("snarkjs_prove_s"):
        row["unseen_key_snarkjs_ratio"] = row["snarkjs_prove_s"] / row["cli_unseen_key_s"]
    row["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    row["children_peak_rss_mib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return row


COLD_COLUMNS = [
    ("curve", "curve"),
    ("fresh_key_load_s", "key load"),
    ("cli_cold_s", "prooflane prove"),
    ("cli_cold_cpu_s", "CPU-s"),
    ("cli_tables_s", "tables stored"),
    ("cli_libraries_prove_s", "libraries"),
    ("cli_unseen_key_s", "unseen key"),
    ("cli_unseen_key_cpu_s", "CPU-s"),
    ("snarkjs_prove_s", "snarkjs"),
    ("snarkjs_prove_cpu_s", "CPU-s"),
    ("rapidsnark_cold_s", "rapidsnark cold"),
    ("rapidsnark_warm_s", "rapidsnark"),
    ("rapidsnark_warm_cpu_s", "CPU-s"),
    ("groth16py_prove_s", "groth16py"),
    ("groth16py_prove_cpu_s", "CPU-s"),
    ("snarkjs_cold_ratio", "x snarkjs"),
    ("unseen_key_snarkjs_ratio", "unseen x snarkjs"),
    ("rapidsnark_cold_ratio", "x rapidsnark"),
    ("rapidsnark_tables_ratio", "tables x rapidsnark"),
    ("groth16py_cold_ratio", "x g16py"),
]
WARM_COLUMNS = [
    ("curve", "curve"),
    ("read_zkey_s", "read"),
    ("load_cold_2proc_s", "load 2p"),
    ("synthesize_s", "synth"),
    ("prove_start_s", "start"),
    ("prove_finish_s", "finish"),
    ("prove_2proc_s", "prove 2p"),
    ("verify_s", "verify"),
    ("snarkjs_ratio", "x snarkjs"),
    ("rapidsnark_ratio", "x rapidsnark"),
    ("groth16py_ratio", "x g16py"),
    ("peak_rss_mib", "RSS MiB"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--curves", default="bn128,bls12381")
    parser.add_argument("--constraints", type=int, default=SHARED_CONSTRAINTS)
    parser.add_argument("--zkey", type=Path, help="prove this .zkey (with --wtns) instead of a square chain")
    parser.add_argument("--wtns", type=Path)
    parser.add_argument("--kernels-only", action="store_true", help="only the by-kernel table")
    args = parser.parse_args()
    if (args.zkey is None) != (args.wtns is None):
        parser.error("--zkey and --wtns go together")
    RESULTS.mkdir(parents=True, exist_ok=True)  # the peers write their proofs here
    measure = kernels_only if args.kernels_only else bench
    if args.zkey is not None:
        given = (args.zkey.resolve(), args.wtns.resolve())
        rows = [measure(read_zkey(given[0]).curve, args.constraints, args.repeat, given)]
    else:
        rows = [
            measure(curve_by_name(c), args.constraints, args.repeat, None) for c in args.curves.split(",")
        ]
    for row in rows:
        print(f"\nby kernel, {row['curve']}, domain 2^{row['domain'].bit_length() - 1}")
        print_table(
            KERNEL_HEADERS,
            kernel_table(row["domain"], row["kernels"]["prooflane"], row["kernels"]["rapidsnark"]),
        )
    print(KERNEL_NOTE)
    stem = args.zkey.stem if args.zkey is not None else args.curves.replace(",", "-")
    if args.kernels_only:
        write_json(
            f"bench_prove-kernels-{stem}-{rows[0]['domain']}", {"repeat": args.repeat, "results": rows}
        )
        return
    for title, columns in (("cold, whole processes", COLD_COLUMNS), ("warm, in this process", WARM_COLUMNS)):
        print(f"\n{title}")
        print_table(
            [c[1] for c in columns],
            [[row.get(k) if row.get(k) is not None else "-" for k, _ in columns] for row in rows],
        )
    print(
        "seconds, medians. cold: whole processes as a user runs them (key load: read + build all points in a "
        "fresh process; unseen key: `prooflane prove` with an empty memory of checked points; CPU-s: "
        "user+system of the whole process tree; the provers run in turns; rapidsnark cold: its first run, "
        "rapidsnark: the median of the later ones); warm: prove 2p = synthesize + two-core prove; "
        "x = peer time / prooflane time (x rapidsnark in the warm table: rapidsnark's whole process)"
    )
    # one file per input, so that a run of one curve leaves the other's results in place
    name = f"bench_prove-{stem}"
    write_json(name, {"repeat": args.repeat, "results": rows})


if __name__ == "__main__":
    with claim_cpu():
        main()
