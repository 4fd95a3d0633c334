"""Fixed-base tables (``msm_tables``): a warm partition prove over them against the plain one, in turns.

For one key and witness (by default the shared 65k square chain; ``--zkey K --wtns W`` for another, e.g.
``benchmarks/poseidon_merkle.py``'s): the tables' build time and bytes per base section (as a worker
builds them when it first loads a key), then ``--repeat`` rounds, each of one warm partition prove on the
plain sections and one on the tabled ones (the order alternating), on ``--threads`` threads: the device
section (``prove_start``: the NTT block and the four G1 MSMs), the finalizer's G2 MSM and assembly
(``prove_finish``), and their sum, the warm partition prove; beside them rapidsnark's whole process on the
same files (the shared peer or ``$RAPIDSNARK``), once a round, for "the warm prove as a share of a cold
rapidsnark process". Every proof verifies. Medians and spreads; prints a table; writes
benchmarks/results/bench_tables-<input>.json.

Usage: ``python benchmarks/bench_tables.py [--repeat 5] [--threads 2] [--zkey K --wtns W]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import RESULTS, claim_cpu, print_table, write_json
from bench_prove import SHARED, rapidsnark_binary, timed_process, verifies
from prooflane.groth16 import (
    preload,
    prove_finish,
    prove_start,
    read_wtns,
    read_zkey,
    release,
    synthesize,
    verify,
)
from prooflane.groth16._tablecache import ENV as TABLES_ENV
from prooflane.groth16.arithmetic import arithmetic
from prooflane.groth16.prover import _CACHE, BASES, base_section, key_table_bytes, section_rows


def timed(fn: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--zkey", type=Path, default=SHARED / "circuit_final.zkey")
    parser.add_argument("--wtns", type=Path, default=SHARED / "witness.wtns")
    args = parser.parse_args()
    # The tables are built here, not mapped from a store a daemon or an earlier run filled: their build is
    # timed. They go to a temporary store, removed at the end.
    store = tempfile.TemporaryDirectory(prefix="bench-tables-")
    os.environ[TABLES_ENV] = store.name
    key, witness = read_zkey(args.zkey), read_wtns(args.wtns)
    if arithmetic(key.curve).name != "c-extension":
        sys.exit("the C extension does not prove this curve here: the libraries build no tables")
    release(key)
    preload(key)
    plain = {n: base_section(key.curve, key.digest, n, None) for n in BASES}
    builds: dict[str, float] = {}
    for name in BASES:  # one section at a time, as timed; the libraries' cache then holds the tabled one
        builds[name], _ = timed(lambda name=name: preload(key, (name,), tables=True))
    tabled = {n: base_section(key.curve, key.digest, n, None) for n in BASES}
    sizes = {n: len(s.tables.data) for n, s in tabled.items() if s.tables is not None}
    assert sum(sizes.values()) == key_table_bytes(key.curve, key.n_vars, key.n_public, key.domain_size)
    bases = sum(section_rows(key, n).nbytes for n in BASES)

    def use(sections: dict[str, Any]) -> None:
        for name, section in sections.items():
            _CACHE.replace(key.digest, name, base_section(key.curve, key.digest, name, None), section)

    synthesized = synthesize(key, witness)
    runs: dict[str, dict[str, list[float]]] = {
        w: {"start": [], "finish": [], "prove": []} for w in ("plain", "tables")
    }
    rapid: list[float] = []
    binary = rapidsnark_binary() if key.curve.name == "bn128" else None
    proof_path, public_path = (
        RESULTS / "tables-rapidsnark-proof.json",
        RESULTS / "tables-rapidsnark-public.json",
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    for round_ in range(args.repeat):
        order = ("plain", "tables") if round_ % 2 == 0 else ("tables", "plain")
        for way in order:
            use(plain if way == "plain" else tabled)
            start_s, state = timed(lambda: prove_start(key, synthesized, threads=args.threads))
            finish_s, proof = timed(lambda state=state: prove_finish(state, threads=args.threads))
            assert verify(key.verification_key, proof.public, proof), way
            runs[way]["start"].append(start_s)
            runs[way]["finish"].append(finish_s)
            runs[way]["prove"].append(start_s + finish_s)
        if binary is not None:
            rapid.append(
                timed_process(
                    [str(binary), str(args.zkey), str(args.wtns), str(proof_path), str(public_path)]
                )[0]
            )
    if binary is not None:
        assert verifies(args.zkey, proof_path, public_path)
    out: dict[str, Any] = {
        "input": str(args.zkey),
        "domain": key.domain_size,
        "threads": args.threads,
        "bases_bytes": bases,
        "table_bytes": sizes,
        "table_bytes_total": sum(sizes.values()),
        "table_shapes": {
            n: {"window": s.tables.window, "stride": s.tables.stride, "count": s.tables.count}
            for n, s in tabled.items()
            if s.tables
        },
        "build_s": builds,
        "build_s_total": sum(builds.values()),
        "plain": {k: spread(v) for k, v in runs["plain"].items()},
        "tables": {k: spread(v) for k, v in runs["tables"].items()},
        "speedup": {
            k: statistics.median(p / t for p, t in zip(runs["plain"][k], runs["tables"][k], strict=True))
            for k in ("start", "finish", "prove")
        },
        "rapidsnark_process_s": spread(rapid) if rapid else None,
    }
    saved = out["plain"]["prove"]["median"] - out["tables"]["prove"]["median"]
    out["partitions_to_repay_build"] = out["build_s_total"] / saved if saved > 0 else None
    mib = 1 << 20
    rows = []
    for way in ("plain", "tables"):
        r = out[way]
        share = r["prove"]["median"] / out["rapidsnark_process_s"]["median"] if rapid else None
        rows.append([
            way, r["start"]["median"], r["finish"]["median"], r["prove"]["median"],
            f"{r['prove']['min']:.3f}-{r['prove']['max']:.3f}", share,
        ])  # fmt: skip
        out[way]["share_of_rapidsnark_process"] = share
    print(f"\n{args.zkey.name}, domain 2^{key.domain_size.bit_length() - 1}, {args.threads} threads")
    print_table(["sections", "start", "finish", "warm prove", "spread", "of rapidsnark"], rows)
    speed = out["speedup"]
    rapid_s = f"{out['rapidsnark_process_s']['median']:.3f} s" if rapid else "-"
    repaid = out["partitions_to_repay_build"]
    print(
        f"tables: {out['table_bytes_total'] / mib:.0f} MiB for {bases / mib:.0f} MiB of bases, built in "
        f"{out['build_s_total']:.2f} s; speedup start {speed['start']:.2f}x, finish {speed['finish']:.2f}x, "
        f"prove {speed['prove']:.2f}x (medians of per-round ratios); rapidsnark's process {rapid_s}; "
        f"the build repaid after {repaid:.0f} partitions"
        if repaid
        else "the build is never repaid"
    )
    write_json(f"bench_tables-{args.zkey.stem}", {"repeat": args.repeat, "results": out})
    store.cleanup()


if __name__ == "__main__":
    with claim_cpu():
        main()
