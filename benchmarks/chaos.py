"""Chaos: a real daemon proves a workload while processes of its tree are SIGKILLed at random moments.

Starts `prooflane serve` (tiny profile by default) on a fresh data folder, submits ``--jobs`` jobs of the mix
(every built-in kind by default), and while they run kills, every ``--interval`` seconds (drawn from the
``--seed``), a process of the daemon's tree: the forkserver, the resource tracker, a synthesis process, a
prover or a finalizer, spreading the faults evenly over the kinds present. With ``--kill-daemon`` the daemon
itself is also killed ``--daemon-kills`` times and started again on the same data folder (the journal resumes
its jobs). Meanwhile it samples ``/healthz`` and ``/status`` and reads the event stream; afterwards it checks
every property listed in ``prooflane.testing.chaos`` (invariants in every sample, health honest about dead
workers, every job done with proofs that verify, nothing reported twice, the budget back to zero, no process
left behind).

Prints a table (faults injected and survived per kind of process, jobs, partitions retried, time to drain)
and the violations found, writes benchmarks/results/chaos[-kill-daemon].json, and exits 1 when a check
failed. Asserts nothing about time.

Usage: ``python benchmarks/chaos.py [--jobs 50] [--profile tiny] [--seed 1] [--kill-daemon]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table, write_json
from prooflane.cli.workload import DEFAULT_MIX
from prooflane.testing.chaos import DEFAULT_KINDS, ChaosReport, ChaosRun, ChaosSettings
from prooflane.testing.faults import ProcessKind


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50, help="jobs to submit (default 50)")
    parser.add_argument("--mix", default=DEFAULT_MIX, help=f"kinds and weights (default {DEFAULT_MIX})")
    parser.add_argument("--profile", default="tiny", help="circuit sizes (default tiny)")
    parser.add_argument("--seed", type=int, default=1, help="the faults' random seed (default 1)")
    parser.add_argument(
        "--interval", default="0.5,2.5", help="seconds between faults, drawn from MIN,MAX (default 0.5,2.5)"
    )
    parser.add_argument(
        "--kinds",
        default=",".join(k.value for k in DEFAULT_KINDS),
        help="kinds of process to kill (default: all but the daemon)",
    )
    parser.add_argument(
        "--kill-daemon", action="store_true", help="kill the daemon itself too, and restart it"
    )
    parser.add_argument(
        "--daemon-kills", type=int, default=3, help="with --kill-daemon: how often (default 3)"
    )
    parser.add_argument("--config", type=Path, help="daemon config (TOML; default: max_attempts = 10)")
    parser.add_argument("--data", type=Path, help="the data folder's parent (default: a temporary folder)")
    return parser.parse_args()


def main() -> int:
    args = _parse()
    low, high = (float(x) for x in args.interval.split(","))
    settings = ChaosSettings(
        profile=args.profile,
        jobs=args.jobs,
        mix=args.mix,
        seed=args.seed,
        interval=(low, high),
        kinds=tuple(ProcessKind(k.strip()) for k in args.kinds.split(",")),
        kill_daemon=args.kill_daemon,
        daemon_kills=args.daemon_kills,
        config=args.config.read_text() if args.config else ChaosSettings.config,
    )
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="prooflane-chaos-") as scratch:
        folder = args.data or Path(scratch)
        started = time.monotonic()
        report = ChaosRun(settings, folder / "data").run()
        wall = time.monotonic() - started
    _print(report, wall, load_before, os.getloadavg()[0])
    name = "chaos-kill-daemon" if args.kill_daemon else "chaos"
    write_json(
        name,
        {"wall_secs": wall, "load_average_1m": [load_before, os.getloadavg()[0]], **report.to_json()},
    )
    return 0 if report.ok else 1


def _print(report: ChaosReport, wall: float, load_before: float, load_after: float) -> None:
    rows = report.by_kind()
    print_table(
        ["process killed", "faults", "survived", "back at work: seen", "mean s", "max s"],
        [
            [
                r["kind"],
                r["injected"],
                r["survived"],
                r["back_to_work_seen"],
                _secs(r["back_to_work_mean_secs"]),
                _secs(r["back_to_work_max_secs"]),
            ]
            for r in rows
        ],
    )
    print()
    done = sum(state == "done" for state in report.jobs.values())
    print_table(
        ["measure", "value"],
        [
            ["jobs done", f"{done}/{len(report.jobs)}"],
            ["partitions (verified)", f"{report.partitions} ({report.verified_partitions})"],
            ["partitions retried", report.partitions_retried],
            ["faults", len(report.faults)],
            ["daemon boots", report.boots],
            ["time to drain", f"{report.drain_secs:.1f} s"],
            ["wall time", f"{wall:.1f} s"],
            ["samples of /healthz + /status", report.samples],
            ["/healthz answer p50 / p99 / max", _latency(report.healthz_ms())],
            ["jobs done while the stream was cut", report.unseen_done],
            ["load average (1 min) start -> end", f"{load_before:.2f} -> {load_after:.2f}"],
            ["violations", len(report.violations)],
        ],
    )
    for violation in report.violations:
        print(f"VIOLATION: {violation}")


def _latency(ms: dict[str, float]) -> str:
    return " / ".join(f"{ms[k]:.0f} ms" for k in ("p50", "p99", "max")) if ms else "-"


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    sys.exit(main())
