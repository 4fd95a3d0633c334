"""The device section on a CUDA GPU against the cpu primitives, on one core and on all cores.

G1 MSM and the quotient H (three NTT pairs, as the prover computes it) at 2^16 to 2^22 (``--sizes``), and
the device section (``prove_start``) and whole proof of a ~2^16-constraint square chain (bench_prove's
inputs). The cuda figures run here; the cpu ones in two child processes pinned to one core and to all
cores (RAYON_NUM_THREADS set to match, for the native libraries' thread pools). Inputs are the same in
every process (seeded), the results are compared (a mismatch is an error), and each figure is the median
of ``--repeat`` warm runs; the kernels' first compilation is reported apart. MSM bases: 2^16 distinct
random points repeated to the size (the cost of an MSM does not depend on distinctness).

Without a GPU it says so and exits 0 (1 with ``--require-gpu``), so ``make bench`` passes anywhere.
Prints a table; writes benchmarks/results/bench_cuda.json.
Usage: ``python benchmarks/bench_cuda.py [--sizes 16,18,20,22] [--curve bn128] [--repeat 3]
[--constraints 65000] [--cpu-max-log 22] [--require-gpu]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table, write_json
from prooflane.groth16 import Curve, FieldVector, curve_by_name, from_ints

DISTINCT = 1 << 16  # distinct MSM bases, repeated up to the size


def median(repeat: int, fn: Callable[[], Any]) -> tuple[float, Any]:
    """(median seconds of ``repeat`` runs, the last result)."""
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def msm_inputs(curve: Curve, log_n: int) -> tuple[np.ndarray[Any, Any], FieldVector]:
    """(rows of bases, scalars) for an MSM of 2^log_n: a quarter 0/1 like a witness, the rest random."""
    from prooflane.groth16.adapters import library
    from prooflane.groth16.points import mont_row

    be, rng = library(curve), random.Random(log_n)
    step = be.mul(be.g1(be.g1_gen), rng.randrange(1, curve.r))
    acc, points = step, []
    for _ in range(min(DISTINCT, 1 << log_n)):
        points.append(mont_row(curve, be.g1_xy(acc)).tobytes())  # the key's (Montgomery) row layout
        acc = acc + step
    rows = np.frombuffer(b"".join(points), dtype=np.uint8).reshape(len(points), 2 * curve.n8q)
    rows = np.tile(rows, ((1 << log_n) // rows.shape[0], 1))
    n = 1 << log_n
    scalars = [rng.randrange(2) for _ in range(n // 4)] + [rng.randrange(curve.r) for _ in range(n - n // 4)]
    return rows, from_ints(scalars)


def h_inputs(curve: Curve, log_n: int) -> tuple[FieldVector, FieldVector, FieldVector]:
    rng, n = random.Random(-log_n), 1 << log_n
    return tuple(from_ints([rng.randrange(curve.r) for _ in range(n - 3)]) for _ in range(3))  # type: ignore[return-value]


# -- the cpu side, in a pinned child process ---------------------------------------------------------


def cpu_worker(curve: Curve, sizes: list[int], cpu_max_log: int, constraints: int, repeat: int) -> None:
    """Measure the cpu primitives here (the parent pinned this process) and print JSON."""
    from bench_prove import inputs
    from prooflane.groth16 import prove, prove_finish, prove_start, read_wtns, read_zkey, synthesize
    from prooflane.groth16.arithmetic import arithmetic, cpu_threads

    arith, out = arithmetic(curve), dict[str, Any]()
    for log_n in (s for s in sizes if s <= cpu_max_log):
        rows, scalars = msm_inputs(curve, log_n)
        section = arith.section(rows, 1, checked=True)
        seconds, total = median(repeat, lambda: arith.msm(section, scalars, cpu_threads()))  # noqa: B023
        out[f"msm/{log_n}"] = {"s": seconds, "result": list(total)}
        a, b, c = h_inputs(curve, log_n)
        seconds, h = median(repeat, lambda: arith.coset_h(a, b, c, 1 << log_n, cpu_threads()))  # noqa: B023
        out[f"h/{log_n}"] = {"s": seconds, "result": int(np.bitwise_xor.reduce(h, axis=None))}
    zkey, wtns, _ = inputs(curve, constraints)
    key, witness = read_zkey(zkey), read_wtns(wtns)
    synthesized = synthesize(key, witness)
    prove(key, witness)  # warm: the library points of the key
    seconds, state = median(repeat, lambda: prove_start(key, synthesized, randomness=(1, 2)))
    out["prove_start"] = {"s": seconds, "result": [list(state.a), list(state.h)]}
    out["prove"] = {"s": median(repeat, lambda: prove_finish(prove_start(key, synthesize(key, witness))))[0]}
    if os.cpu_count() and len(os.sched_getaffinity(0)) > 1:
        out["prove_2proc"] = {"s": median(repeat, lambda: prove(key, witness, threads=2))[0]}
    print(json.dumps(out))


def run_cpu(args: argparse.Namespace, cores: int) -> dict[str, Any]:
    env = dict(os.environ, RAYON_NUM_THREADS=str(cores), OMP_NUM_THREADS=str(cores))
    command = [sys.executable, __file__, "--cpu-worker", "--curve", args.curve, "--sizes", args.sizes]
    command += ["--cpu-max-log", str(args.cpu_max_log), "--constraints", str(args.constraints)]
    command += ["--repeat", str(args.repeat)]
    pinned = ["taskset", "-c", f"0-{cores - 1}", *command]
    done = subprocess.run(pinned, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"the cpu run on {cores} cores failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# -- the cuda side ---------------------------------------------------------------------------------------


def cuda_run(curve: Curve, sizes: list[int], constraints: int, repeat: int) -> dict[str, Any]:
    from bench_prove import inputs
    from prooflane.groth16 import prove_finish, read_wtns, read_zkey, synthesize
    from prooflane.groth16.cuda import coset_h, device_memory, prove_start
    from prooflane.groth16.cuda._msm import msm_kernels

    kernels, out = msm_kernels(curve.q), dict[str, Any]()
    start = time.perf_counter()  # the first launches compile the kernels
    warm = min(8, *sizes)
    small = msm_inputs(curve, warm)
    kernels.msm(kernels.upload(small[0]), small[1])
    coset_h(curve, *h_inputs(curve, warm), 1 << warm)
    out["compile_s"] = time.perf_counter() - start
    for log_n in sizes:
        rows, scalars = msm_inputs(curve, log_n)
        upload_s, bases = median(1, lambda: kernels.upload(rows))  # noqa: B023
        seconds, total = median(repeat, lambda: kernels.msm(bases, scalars))  # noqa: B023
        out[f"msm/{log_n}"] = {"s": seconds, "upload_s": upload_s, "result": list(total)}
        a, b, c = h_inputs(curve, log_n)
        seconds, h = median(repeat, lambda: coset_h(curve, a, b, c, 1 << log_n))  # noqa: B023
        out[f"h/{log_n}"] = {"s": seconds, "result": int(np.bitwise_xor.reduce(h, axis=None))}
    zkey, wtns, _ = inputs(curve, constraints)
    key, witness = read_zkey(zkey), read_wtns(wtns)
    synthesized = synthesize(key, witness)
    prove_start(key, synthesized)  # warm: the key's bases in device memory, the domain's tables
    seconds, state = median(repeat, lambda: prove_start(key, synthesized, randomness=(1, 2)))
    out["prove_start"] = {"s": seconds, "result": [list(state.a), list(state.h)]}
    out["prove"] = {"s": median(repeat, lambda: prove_finish(prove_start(key, synthesize(key, witness))))[0]}
    free, total = device_memory()
    out["device_memory"] = {"free": free, "total": total}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", default="16,18,20,22", help="log2 sizes of the MSMs and NTTs")
    parser.add_argument("--curve", default="bn128")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--constraints", type=int, default=65000, help="the whole proof's square chain")
    parser.add_argument("--cpu-max-log", type=int, default=22, help="largest size measured on the cpu")
    parser.add_argument("--require-gpu", action="store_true", help="exit 1 (not 0) without a GPU")
    parser.add_argument("--cpu-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    curve, sizes = curve_by_name(args.curve), [int(s) for s in args.sizes.split(",")]
    if args.cpu_worker:
        cpu_worker(curve, sizes, args.cpu_max_log, args.constraints, args.repeat)
        return
    from prooflane.groth16.cuda import gpu_available, unavailable_reason

    if not gpu_available():
        why = unavailable_reason() or "NUMBA_ENABLE_CUDASIM=1: the simulator is no GPU"
        print(f"bench_cuda: skipped, no GPU to run the kernels on ({why})")
        sys.exit(1 if args.require_gpu else 0)
    cores = len(os.sched_getaffinity(0))
    gpu = cuda_run(curve, sizes, args.constraints, args.repeat)
    one, every = run_cpu(args, 1), run_cpu(args, cores)
    report(args, curve, sizes, cores, gpu, one, every)


def report(
    args: argparse.Namespace,
    curve: Curve,
    sizes: list[int],
    cores: int,
    gpu: dict[str, Any],
    one: dict[str, Any],
    every: dict[str, Any],
) -> None:
    from numba import cuda as numba_cuda

    cuda: Any = numba_cuda
    names = [f"msm/{s}" for s in sizes] + [f"h/{s}" for s in sizes] + ["prove_start", "prove"]
    rows, mismatches = [], []
    for name in names:
        g, c1, cn = gpu.get(name, {}), one.get(name, {}), every.get(name, {})
        for cpu in (c1, cn):
            if "result" in cpu and "result" in g and cpu["result"] != g["result"]:
                mismatches.append(name)
        speed1 = c1["s"] / g["s"] if "s" in c1 and "s" in g else None
        speedn = cn["s"] / g["s"] if "s" in cn and "s" in g else None
        rows.append([name, g.get("s"), c1.get("s"), cn.get("s"), speed1, speedn])
    headers = [
        "operation (log2 n)",
        "cuda s",
        "cpu 1 core s",
        f"cpu {cores} cores s",
        "x 1 core",
        f"x {cores}",
    ]
    print_table(headers, rows)
    print(f"kernels compiled in {gpu['compile_s']:.1f} s; two-process cpu prove: {every.get('prove_2proc')}")
    gpu_name: Any = getattr(cuda.get_current_device(), "name", "")
    write_json(
        "bench_cuda",
        {
            "curve": curve.name,
            "gpu": gpu_name.decode() if isinstance(gpu_name, bytes) else str(gpu_name),
            "cores": cores,
            "constraints": args.constraints,
            "repeat": args.repeat,
            "cuda": gpu,
            "cpu_1_core": one,
            f"cpu_{cores}_cores": every,
            "mismatches": sorted(set(mismatches)),
        },
    )
    if mismatches:
        raise SystemExit(f"cuda and cpu results differ: {sorted(set(mismatches))}")


if __name__ == "__main__":
    main()
