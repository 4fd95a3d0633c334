"""The status tracker's memory over a long run: a million jobs through the tracker and the journal, RSS over
time.

One process holds what a daemon's holds for its jobs: a :class:`~prooflane.status.StatusTracker` (the
default config: retention 60 s, the last 50 recent jobs and failures, 256 recent partitions, 4,096 events
kept for resuming) and the journal (:class:`prooflane.store.Store`, its SQLite file on disk). Each job is
journalled and told to the tracker as an engine does (submitted, its partition synthesized, leased,
proven, finalized, its proof saved, done), one job in 1,000 fails; the tracker's clock moves 20 ms a job, so
about 3,000 ended jobs are in the live view at once (the retention) and leave it; every 1,000 jobs a
``/status`` is built (bounded, tagged, encoded) and the invariants checked. Every ``--every`` jobs a row:
the process's RSS, the jobs in the live view, the journal's size.

The journal keeps every job and its proof (``GET /v1/jobs/{id}/proof`` answers for any job ever proven):
its file grows by design, on disk, not in memory.

Prints a table and writes benchmarks/results/bench_long_run.json. Asserts nothing.

Usage: python benchmarks/bench_long_run.py [--jobs 1000000] [--every 100000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psutil

from _common import print_table, write_json
from prooflane import events as ev
from prooflane.status.tracker import StatusTracker, TrackerConfig
from prooflane.store import Store

SECS_PER_JOB = 0.02
PROOF = {"pi_a": ["1", "2", "1"], "pi_b": [["1", "2"], ["3", "4"], ["1", "0"]], "pi_c": ["5", "6", "1"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--every", type=int, default=100_000, help="a row every this many jobs")
    args = parser.parse_args()
    me = psutil.Process()
    now = [0.0]
    tracker = StatusTracker(TrackerConfig(memory_total_bytes=1 << 34), clock=lambda: now[0])
    tracker.apply(ev.WorkerRegistered(at=0.0, worker_id="cpu:0/w0", device="cpu:0"))
    minter = ev.LeaseMinter()
    rows: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="bench-long-run-") as tmp:
        journal_path = Path(tmp) / "journal.sqlite3"
        journal = Store(journal_path)
        start = time.monotonic()
        for n in range(1, args.jobs + 1):
            job_id = f"job-{n:08d}"
            at = now[0]
            journal.insert_job(job_id=job_id, kind="winning-post", priority="normal", request={"sector": "s"},
                               randomness="00", partitions=1, submitted_at=at)  # fmt: skip
            tracker.apply(ev.JobSubmitted(at=at, job_id=job_id, kind="winning-post", priority="normal",
                                          partitions=1))  # fmt: skip
            tracker.apply(ev.SynthesisStarted(at=at, job_id=job_id, partition=0))
            if n % 1000 == 0:  # one in 1,000 fails
                journal.end_job(job_id, "failed", error="synthesis failed: x", finished_at=at,
                                close_partitions="failed")  # fmt: skip
                tracker.apply(
                    ev.SynthesisFailed(at=at, job_id=job_id, partition=0, reason="synthesis failed: x")
                )
                tracker.apply(ev.JobFailed(at=at, job_id=job_id, reason="synthesis failed: x", partition=0))
            else:
                tracker.apply(ev.SynthesisFinished(at=at, job_id=job_id, partition=0, synth_ms=5.0))
                token = minter.mint()
                tracker.apply(ev.LeaseGranted(at=at, token=token, worker_id="cpu:0/w0", device="cpu:0",
                                              job_id=job_id, partition=0))  # fmt: skip
                tracker.apply(ev.DeviceSectionFinished(at=at, token=token, prove_ms=10.0))
                journal.save_proof(job_id, 0, PROOF, ["1"])
                journal.set_partition(job_id, 0, "done")
                tracker.apply(ev.FinalizeFinished(at=at, token=token, finalize_ms=3.0))
                journal.end_job(job_id, "done", error=None, finished_at=at, close_partitions=None)
                tracker.apply(ev.JobDone(at=at, job_id=job_id))
            now[0] += SECS_PER_JOB
            if n % 1000 == 0:
                snapshot = tracker.snapshot()
                snapshot.bounded(20, 20).to_json_text()
                snapshot.tag()
            if n % args.every == 0 or n == args.jobs:
                snapshot = tracker.snapshot()
                row = {
                    "jobs": n,
                    "secs": time.monotonic() - start,
                    "rss_mib": me.memory_info().rss / 2**20,
                    "live_jobs": snapshot.live_jobs.total,
                    "recent_jobs": len(snapshot.recent_jobs),
                    "recent_failures": len(snapshot.recent_failures),
                    "invariants_ok": float(snapshot.invariants_ok),
                    "journal_mib": journal_path.stat().st_size / 2**20,
                }
                rows.append(row)
                said = (f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items())
                print(" ".join(said), flush=True)
        journal.close()
    columns = ["jobs", "secs", "rss_mib", "live_jobs", "recent_jobs", "recent_failures", "invariants_ok",
               "journal_mib"]  # fmt: skip
    print(f"{args.jobs:,} jobs, load {os.getloadavg()[0]:.2f}")
    print_table(columns, [[row[c] for c in columns] for row in rows])
    write_json("bench_long_run", {"jobs": args.jobs, "secs_per_job": SECS_PER_JOB, "rows": rows})


if __name__ == "__main__":
    main()
