"""A Groth16 prove by kernel: where its wall and CPU seconds go, for prooflane and for rapidsnark.

- prooflane, in this process: the NTT block (``coset_h``: the three inverse and three coset transforms and
  the pointwise step), each G1 MSM (A, B1, C, H) and the G2 MSM (B2), each timed alone on the proving
  threads (wall, and CPU of this process: the C extension's threads are its own); "fixed" is what a whole
  ``prove`` costs beyond their sum (synthesis, blinding, assembly, the calls between; 0 where noise makes
  the difference negative).
- rapidsnark, a whole process under ``perf record`` (sampling every thread at 2 kHz, no call graphs: its
  assembly has no unwind tables): rapidsnark runs its kernels one after another, so the run is cut into
  20 ms bins and each bin goes to the kernel whose own functions (``MSM<Curve<RawFq>>``, ``Curve<RawFq>``:
  G1; anything of ``F2Field``: G2; ``FFT``: the NTT block) it sampled most; bins with none of them are
  "fixed" (reading the files, the witness, writing the proof). Wall is the bins' time, CPU their samples;
  the whole is from the first sample to the last (perf's own start and end left out).
  Its four G1 MSMs are not told apart.
- a published reference row: gnark-crypto on a 2-vCPU aws m5.large (zka.lc), random scalars, 2^16 only;
  marked as published, not measured here.

Used by bench_prove.py (its "by kernel" table); ``python benchmarks/kernels.py ZKEY WTNS`` prints the table
for one key alone.
"""

from __future__ import annotations

import argparse
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table
from prooflane.groth16 import ProvingKey, Witness, prove, read_wtns, read_zkey, synthesize
from prooflane.groth16.arithmetic import arithmetic
from prooflane.groth16.prover import msm, msm_scalars, section_rows

MSMS = (("a", "G1 MSM A"), ("b1", "G1 MSM B1"), ("c", "G1 MSM C"), ("h", "G1 MSM H"), ("b2", "G2 MSM B2"))
KERNELS = ("NTT block", *(title for _, title in MSMS), "G1 MSMs, all four", "fixed", "whole prove")
PUBLISHED_GNARK_2VCPU_2_16 = {"G1 MSM, one": 0.290, "G2 MSM B2": 0.715, "NTT block": 6 * 0.0126}
SAMPLE_HZ = 2000
BIN_SECS = 0.02


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _timed(fn: Any) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), _cpu()
    fn()
    return time.perf_counter() - wall, _cpu() - cpu


def prooflane_kernels(key: ProvingKey, witness: Witness, threads: int, repeat: int) -> dict[str, Any]:
    """{kernel: {"wall_s", "cpu_s"}}: medians of ``repeat`` runs of each, on ``threads`` threads."""
    synthesized = synthesize(key, witness)
    ext = arithmetic(key.curve)
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in KERNELS}
    h: Any = None
    prove(key, witness, threads=threads)  # warm: the sections loaded, the pages read
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), _cpu()
        h = ext.coset_h(synthesized.a, synthesized.b, synthesized.c, key.domain_size, threads)
        runs["NTT block"].append((time.perf_counter() - wall, _cpu() - cpu))
        for name, title in MSMS:
            rows = key.b2_points if name == "b2" else section_rows(key, name)
            scalars = np.ascontiguousarray(msm_scalars(key, name, synthesized.witness, h))
            runs[title].append(
                _timed(lambda: msm(key.curve, key.digest, name, rows, scalars, threads=threads))  # noqa: B023
            )
        runs["whole prove"].append(_timed(lambda: prove(key, witness, threads=threads)))
    out = {name: _medians(values) for name, values in runs.items() if values}
    g1 = [title for _, title in MSMS if title.startswith("G1")]
    out["G1 MSMs, all four"] = {f: sum(out[t][f] for t in g1) for f in ("wall_s", "cpu_s")}
    parts = ["NTT block", *(title for _, title in MSMS)]
    out["fixed"] = {
        f: max(0.0, out["whole prove"][f] - sum(out[t][f] for t in parts)) for f in ("wall_s", "cpu_s")
    }
    return out


def _medians(values: list[tuple[float, float]]) -> dict[str, float]:
    return {
        "wall_s": statistics.median(v[0] for v in values),
        "cpu_s": statistics.median(v[1] for v in values),
    }


_CLASSES = (
    ("G2 MSM B2", re.compile(r"F2Field")),
    ("NTT block", re.compile(r"FFT|fft")),
    ("G1 MSMs, all four", re.compile(r"MSM<Curve<RawFq>|Curve<RawFq>::")),
)


def rapidsnark_kernels(prover: Path, zkey: Path, wtns: Path) -> dict[str, Any] | None:
    """rapidsnark's one whole process by kernel (the module's docstring says how), or None where ``perf``
    cannot sample it here."""
    if shutil.which("perf") is None:
        return None
    with tempfile.TemporaryDirectory(prefix="kernels-") as tmp:
        data = Path(tmp) / "perf.data"
        cmd = [str(prover), str(zkey), str(wtns), f"{tmp}/proof.json", f"{tmp}/public.json"]
        record = subprocess.run(
            ["perf", "record", "-q", "-F", str(SAMPLE_HZ), "-o", str(data), "--", *cmd],
            capture_output=True, text=True,
        )  # fmt: skip
        if record.returncode != 0 or not data.exists():
            return None
        script = subprocess.run(
            ["perf", "script", "-i", str(data), "-F", "time,ip,sym"], capture_output=True, text=True
        )
    if script.returncode != 0:
        return None
    samples: list[tuple[float, str]] = []
    for line in script.stdout.splitlines():
        parts = line.split(None, 2)
        if len(parts) == 3 and parts[0].endswith(":"):
            samples.append((float(parts[0][:-1]), parts[2]))
    if not samples:
        return None
    start = samples[0][0]
    bins: dict[int, Counter[str]] = {}
    for when, symbol in samples:
        counts = bins.setdefault(int((when - start) / BIN_SECS), Counter())
        counts["all"] += 1
        for name, pattern in _CLASSES:
            if pattern.search(symbol):
                counts[name] += 1
                break
    out = {
        name: {"wall_s": 0.0, "cpu_s": 0.0}
        for name in ("NTT block", "G1 MSMs, all four", "G2 MSM B2", "fixed")
    }
    for counts in bins.values():
        named = [(counts[name], name) for name, _ in _CLASSES if counts[name]]
        kernel = max(named)[1] if named else "fixed"
        out[kernel]["wall_s"] += BIN_SECS
        out[kernel]["cpu_s"] += counts["all"] / SAMPLE_HZ
    out["whole prove"] = {"wall_s": samples[-1][0] - start, "cpu_s": len(samples) / SAMPLE_HZ}
    return out


def table(domain: int, ours: dict[str, Any], theirs: dict[str, Any] | None) -> list[list[str]]:
    """Rows: kernel, prooflane wall and CPU, rapidsnark wall and CPU, published gnark-crypto wall."""
    rows = []
    for kernel in KERNELS:
        mine = ours.get(kernel)
        peer = theirs.get(kernel) if theirs else None
        published = None
        if domain == 1 << 16:
            published = PUBLISHED_GNARK_2VCPU_2_16.get(kernel)
            if kernel.startswith("G1 MSM ") and kernel != "G1 MSMs, all four":
                published = PUBLISHED_GNARK_2VCPU_2_16["G1 MSM, one"]
        rows.append([
            kernel,
            f"{mine['wall_s']:.3f}" if mine else "-",
            f"{mine['cpu_s']:.3f}" if mine else "-",
            f"{peer['wall_s']:.3f}" if peer else "-",
            f"{peer['cpu_s']:.3f}" if peer else "-",
            f"{published:.3f}" if published is not None else "-",
        ])  # fmt: skip
    return rows


HEADERS = [
    "kernel",
    "prooflane wall s",
    "CPU-s",
    "rapidsnark wall s",
    "CPU-s",
    "gnark-crypto 2 vCPU (published)",
]
NOTE = (
    "prooflane: each kernel alone in one process, medians; rapidsnark: one whole process sampled by perf "
    "(whole: from its first sample to its last), its kernels told apart by their own functions in 20 ms "
    "bins (its four G1 MSMs together); gnark-crypto: "
    "published by zka.lc for an aws m5.large (2 vCPU, random scalars, 2^16; the NTT row is six FFTs), not "
    "measured here"
)


def main() -> None:
    from bench_prove import rapidsnark_binary

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("zkey", type=Path)
    parser.add_argument("wtns", type=Path)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    key = read_zkey(args.zkey)
    ours = prooflane_kernels(key, read_wtns(args.wtns), args.threads, args.repeat)
    prover = rapidsnark_binary()
    theirs = (
        rapidsnark_kernels(prover, args.zkey, args.wtns) if prover and key.curve.name == "bn128" else None
    )
    print(f"by kernel, domain 2^{key.domain_size.bit_length() - 1}, {args.threads} threads")
    print_table(HEADERS, table(key.domain_size, ours, theirs))
    print(NOTE)


if __name__ == "__main__":
    main()
