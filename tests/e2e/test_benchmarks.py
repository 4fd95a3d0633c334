"""Every benchmark runs to its end at its smallest size and writes its JSON: a benchmark a user cannot run
from a fresh clone is a broken promise of the docs, whatever its figures were. Asserts nothing about time."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"

RUNS = [
    ("bench_load.py", ["--jobs", "4", "--sse", "1", "--pollers", "1", "--hold", "0.5"], "bench_load"),
    ("bench_status.py", ["--samples", "5", "--jobs", "2"], "bench_status"),
    ("bench_status.py", ["--samples", "3", "--jobs", "30", "--fresh"], "bench_status"),
    ("bench_status.py", ["--samples", "4", "--daemon", "--daemon-jobs", "8"], "bench_status"),
    ("bench_long_run.py", ["--jobs", "1500", "--every", "500"], "bench_long_run"),
    ("bench_fleet_follow.py", ["--daemons", "1", "--jobs", "2", "--secs", "1"], "bench_fleet_follow"),
    ("bench_synth.py", ["--profiles", "tiny", "--repeat", "1"], "bench_synth"),
    ("bench_multipart.py", ["--mib", "1", "--repeat", "1"], "bench_multipart"),
    ("bench_witness.py", ["--bits", "16", "--inputs", "1", "--repeat", "1"], "bench_witness"),
    (
        "bench_throughput.py",
        ["--circuit", "merkle", "--paths", "1", "--depth", "2", "--inputs", "2", "--repeat", "1"],
        "bench_throughput",
    ),
    ("bench_fleet.py", ["--daemons", "2", "--secs", "1"], "bench_fleet"),
    ("chaos.py", ["--jobs", "2", "--seed", "1"], "chaos"),
    (
        "bench_pipeline.py",
        ["--profile", "tiny", "--jobs", "1", "--mix", "winning-post=1"],
        "bench_pipeline-tiny",
    ),
    (
        "bench_pipeline.py",
        ["--circuit", "merkle", "--paths", "1", "--depth", "2", "--inputs", "2", "--repeat", "1"],
        "bench_pipeline-circom-merkle",
    ),
    ("bench_prove.py", ["--constraints", "1000", "--repeat", "1", "--curves", "bn128"], "bench_prove-bn128"),
    ("bench_cold_worker.py", ["--constraints", "1000"], "bench_cold_worker"),
    ("bench_scale.py", ["--constraints", "1000"], "bench_scale"),
    (
        "bench_cuda.py",
        ["--sizes", "4", "--constraints", "1000", "--cpu-max-log", "4", "--repeat", "1"],
        "bench_cuda",
    ),
    ("bench_ray.py", ["--profile", "tiny", "--rounds", "1"], "bench_ray-tiny"),
]


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("script", "args", "result"), RUNS, ids=[f"{run[0]} {' '.join(run[1])}" for run in RUNS]
)
def test_the_benchmark_runs_and_writes_its_results(
    script: str, args: list[str], result: str, tmp_path: Path
) -> None:
    if script == "bench_ray.py" and importlib.util.find_spec("ray") is None:
        pytest.skip("needs the ray extra")
    env = os.environ | {"PROOFLANE_BENCH_RESULTS": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True, text=True, env=env, timeout=540, cwd=tmp_path,
    )  # fmt: skip
    output = f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert done.returncode == 0, f"{script} exited {done.returncode}\n{output}"
    if script == "bench_cuda.py" and "bench_cuda: skipped, no GPU" in output:
        return  # without a GPU it says so and exits 0 (1 with --require-gpu)
    written = json.loads((tmp_path / f"{result}.json").read_text())
    assert written["machine"]["cpus"] >= 1
    assert f"wrote {tmp_path / result}.json" in done.stdout
