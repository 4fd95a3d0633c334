"""What one worker's processes hold for a key and a partition, against what the memory budget reserves.

For each profile (``--profiles``, default tiny,small,medium) and each arithmetic (the C extension, and the
libraries with ``PROOFLANE_NATIVE=0``), two fresh processes do what a worker's prover and finalizer do
with one porep-c2 partition: read the key without its matrices and load the sections each side uses
(``load_key``), receive the synthesized partition (a pickle, as over the worker's pipe), run
``prove_start`` (the prover) and ``prove_b2`` + ``assemble`` + verify (the finalizer), twice. Each reports
its memory after start, after the key, after the first partition (which also loads what proving loads
once) and its peak RSS during the second (sampled every millisecond); the table sets the key's cost (the
two processes' growth over their start: RSS, and its anonymous part, RSS less the file-backed pages)
beside ``CircuitMeta.key_alloc_bytes``, and a partition's (the growth during the first, and the peak's
growth during the second) beside ``partition_bytes``. A key's rows, mapped
from the file, are counted in RSS by every process that touches them but held once by the page cache:
the anonymous memory (RSS less its file-backed pages) is what a process adds of its own.

    python benchmarks/bench_memory.py [--profiles tiny,small,medium]

Prints a table and writes benchmarks/results/bench_memory.json.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import RESULTS, machine
from prooflane.circuits import Sector, profile_by_name
from prooflane.kinds import StorageInput, SynthesisTask, prepare_builtin, synthesize_partition

KIND, CURVE = "porep-c2", "bn128"

SIDE = """
import json, pickle, sys, threading
import psutil
from prooflane.devices.keys import load_key
from prooflane.devices.steps import DEVICE_SECTION_BASES, FINALIZE_BASES
from prooflane.groth16 import arithmetics, prove_b2, prove_start, verify
from prooflane.groth16.prover import assemble

side, key_path, partition_path = sys.argv[1:4]
me = psutil.Process()

def mem():
    info = me.memory_full_info()
    return {"rss": info.rss, "anon": info.rss - info.shared, "pss": info.pss}

def one():
    with open(partition_path, "rb") as f:
        synthesized = pickle.load(f)
    if side == "prover":
        state = prove_start(key, synthesized, randomness=(1, 2))
        with open(partition_path + ".state", "wb") as f:
            pickle.dump(state, f)
    else:
        with open(partition_path + ".state", "rb") as f:
            state = pickle.load(f)
        proof = assemble(state, prove_b2(key, state.witness))
        assert verify(key.verification_key, proof.public, proof)

out = {"start": mem()}
key = load_key(key_path, DEVICE_SECTION_BASES if side == "prover" else FINALIZE_BASES, matrices=False)
out["key"] = mem()
one()  # the first partition also loads what proving loads once (libraries, tables)
out["warm"] = mem()
peak, done = [me.memory_info().rss], threading.Event()

def sample():
    while not done.wait(0.001):
        peak.append(me.memory_info().rss)

sampler = threading.Thread(target=sample)
sampler.start()
one()
done.set()
sampler.join()
out["peak_rss"] = max(peak)
out["arithmetic"] = arithmetics()["bn128"]
from prooflane.kinds import CircuitMeta  # the reservation as this arithmetic prices it
with open(key_path.removesuffix(".zkey") + ".json") as f:
    out["key_alloc_bytes"] = CircuitMeta(**json.load(f)).key_alloc_bytes
print(json.dumps(out))
"""


def measure(profile: str, folder: Path, native: str) -> dict[str, Any]:
    prof = profile_by_name(profile)
    meta = prepare_builtin(KIND, prof.name, CURVE, str(folder / "keys"))
    sector_path = folder / "sector"
    sector = Sector.open(sector_path) if (sector_path / "meta.json").exists() else None
    if sector is None:
        sector = Sector.create(sector_path, prof.sector_bytes, seed=1)
    task = SynthesisTask(
        "mem", 0, meta.key_path, StorageInput(KIND, prof.name, CURVE, str(sector.path), b"memory")
    )
    synthesized, _ = synthesize_partition(task)
    env = dict(os.environ, PROOFLANE_NATIVE=native, PROOFLANE_THREADS="1")
    sides: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="prooflane-mem-") as tmp:
        partition = Path(tmp) / "partition.pickle"
        partition.write_bytes(pickle.dumps(synthesized))
        for side in ("prover", "finalizer"):
            done = subprocess.run(
                [sys.executable, "-c", SIDE, side, meta.key_path, str(partition)],
                capture_output=True, text=True, env=env, check=True,
            )  # fmt: skip
            sides[side] = json.loads(done.stdout)
    key_rss = sum(s["key"]["rss"] - s["start"]["rss"] for s in sides.values())
    key_anon = sum(s["key"]["anon"] - s["start"]["anon"] for s in sides.values())
    partition_peak = sum(s["peak_rss"] - s["warm"]["rss"] for s in sides.values())
    warm_up = sum(s["warm"]["rss"] - s["key"]["rss"] for s in sides.values())
    return {
        "profile": profile,
        "arithmetic": sides["prover"]["arithmetic"],
        "domain": meta.domain_size,
        "key_nbytes": meta.key_nbytes,
        "key_rss_bytes": key_rss,
        "key_anon_bytes": key_anon,
        "key_alloc_bytes": sides["prover"]["key_alloc_bytes"],
        "partition_peak_bytes": partition_peak,
        "partition_bytes": meta.partition_bytes,
        "first_partition_fixed_bytes": warm_up,
        "sides": sides,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profiles", default="tiny,small,medium")
    args = parser.parse_args()
    rows = []
    print(f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}", flush=True)
    for profile in [p.strip() for p in args.profiles.split(",") if p.strip()]:
        folder = RESULTS / f"memory-{profile}"
        folder.mkdir(parents=True, exist_ok=True)
        for native in ("1", "0"):
            rows.append(measure(profile, folder, native))
    mib = 1 << 20
    print(
        "| profile | arithmetic | domain | key | key: RSS added (2 processes) | key: anonymous added "
        "| key reserved | first partition's fixed cost | partition: peak added | partition reserved |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['profile']} | {r['arithmetic']} | 2^{r['domain'].bit_length() - 1} | "
            f"{r['key_nbytes'] / mib:.1f} MiB | {r['key_rss_bytes'] / mib:.1f} MiB | "
            f"{r['key_anon_bytes'] / mib:.1f} MiB | {r['key_alloc_bytes'] / mib:.1f} MiB | "
            f"{r['first_partition_fixed_bytes'] / mib:.1f} MiB | "
            f"{r['partition_peak_bytes'] / mib:.1f} MiB | {r['partition_bytes'] / mib:.1f} MiB |"
        )
    out = RESULTS / "bench_memory.json"
    out.write_text(json.dumps({"machine": machine(), "rows": rows}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
