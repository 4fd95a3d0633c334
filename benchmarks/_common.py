"""Shared helpers for the benchmarks: each prints a table and writes JSON under benchmarks/results/."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psutil

RESULTS = Path(os.environ.get("PROOFLANE_BENCH_RESULTS") or Path(__file__).resolve().parent / "results")
"""Where results (and the inputs a benchmark caches) go: benchmarks/results/, or $PROOFLANE_BENCH_RESULTS."""


def cpu_model() -> str:
    """The CPU's model name and whether it has AVX-512 IFMA (which of the prover's paths it runs), from
    /proc/cpuinfo ("unknown" elsewhere)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown"
    fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
    name = fields.get("model name\t", "").strip()
    flags = fields.get("flags\t\t", "").split()
    return f"{name or 'unknown'}, {'with' if 'avx512ifma' in flags else 'without'} AVX-512 IFMA"


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    return {
        "cpu": cpu_model(),
        "cpus": psutil.cpu_count(logical=True),
        "memory_bytes": psutil.virtual_memory().total,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


AUTOGROUP_NICE = -19  # the share the benchmark claims for its sessions (see claim_cpu)
_CLAIM: dict[str, Any] = {"claimed": False}  # what claim_cpu achieved; written with every result


@contextlib.contextmanager
def claim_cpu(period: float = 0.5) -> Iterator[dict[str, Any]]:
    """Give this process and every process it starts (the daemons it launches in their own sessions, Ray's
    processes) the highest autogroup priority while the benchmark runs, where the machine allows it.

    Linux's autogroup scheduler (``/proc/sys/kernel/sched_autogroup_enabled``) first shares the CPU
    equally between sessions, whatever the processes' nice values: on a machine shared with other
    sessions, a daemon with two workers then gets one session's share, and a benchmark measures the other
    sessions. Writing a nice value to ``/proc/PID/autogroup`` (root or CAP_SYS_NICE for a negative one)
    sets the share of that process's whole session. The yielded dict says whether it worked
    (``"claimed"``): the benchmarks record it beside their figures."""
    state = _CLAIM
    state.update(claimed=False, autogroup_nice=AUTOGROUP_NICE)
    before = _autogroup_nice()
    if before is None:  # no autogroup scheduling here: the sessions already share the CPU by nice value
        yield state
        return
    stop = threading.Event()

    def claim() -> None:
        me = psutil.Process()
        while True:
            try:
                tree = [me, *me.children(recursive=True)]
            except psutil.Error:
                tree = [me]
            for process in tree:
                with contextlib.suppress(OSError):
                    Path(f"/proc/{process.pid}/autogroup").write_text(f"{AUTOGROUP_NICE}\n")
                    state["claimed"] = True
            if stop.wait(period):
                return

    thread = threading.Thread(target=claim, name="claim-cpu", daemon=True)
    thread.start()
    ran = False  # not after --help or a usage error (argparse exits)
    try:
        yield state
        ran = True
    finally:
        stop.set()
        thread.join()
        if ran:
            claimed = state["claimed"]
            print(f"autogroup priority of the benchmark's sessions ({AUTOGROUP_NICE}) claimed: {claimed}")
        with contextlib.suppress(OSError):
            Path("/proc/self/autogroup").write_text(f"{before}\n")


def _autogroup_nice(path: Path = Path("/proc/self/autogroup")) -> int | None:
    """This session's autogroup nice value, or None where there is none to read: a kernel without
    autogroups has no such file, and one with autogroup scheduling switched off answers an empty one."""
    try:
        found = re.search(r"\bnice\s+(-?\d+)", path.read_text())  # "/autogroup-317 nice 0"
    except OSError:
        return None
    return int(found.group(1)) if found else None


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Print rows as an aligned plain-text table."""
    cells = [[str(h) for h in headers]] + [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for n, row in enumerate(cells):
        print("  ".join(c.rjust(w) if n else c.ljust(w) for c, w in zip(row, widths, strict=True)))
        if n == 0:
            print("  ".join("-" * w for w in widths))


def write_json(name: str, payload: dict[str, Any]) -> Path:
    """Write ``payload`` (with the machine description) to benchmarks/results/NAME.json."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    described = {"machine": machine(), "cpu_claim": dict(_CLAIM), **payload}
    path.write_text(json.dumps(described, indent=2) + "\n")
    print(f"wrote {path}")
    return path


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def tree(process: psutil.Process) -> list[psutil.Process]:
    """A process and all its descendants."""
    with contextlib.suppress(psutil.Error):
        return [process, *process.children(recursive=True)]
    return []


def tree_rss(processes: list[psutil.Process]) -> int:
    """Summed RSS (shared pages counted once per process that maps them)."""
    total = 0
    for p in processes:
        with contextlib.suppress(psutil.Error):
            total += p.memory_info().rss
    return total


def tree_pss(processes: list[psutil.Process]) -> int:
    """Summed PSS (each shared page split between the processes that map it)."""
    total = 0
    for p in processes:
        with contextlib.suppress(psutil.Error, AttributeError):
            total += p.memory_full_info().pss
    return total


_TABLES_SAID = re.compile(
    r"msm tables of (\S+): (built in [0-9.]+ s|found stored|not used \(.*\)|the build failed .*)"
)


def wait_for_tables(log_path: Path, keys: Sequence[str], timeout: float = 900.0) -> dict[str, str]:
    """Wait until a daemon's log (``log_path``) says of each key in ``keys`` (``circom:<name>``, a kind's
    key name) whether its fixed-base tables are stored (``msm_tables = "auto"``: built in the background
    once the key is first proven); returns what it said of each, "not said" for a key it never mentioned
    within ``timeout`` seconds (a daemon with ``msm_tables = false``, say)."""
    deadline, said = time.monotonic() + timeout, {}
    while time.monotonic() < deadline:
        text = log_path.read_text(errors="replace") if log_path.exists() else ""
        said = {m.group(1): m.group(2) for m in _TABLES_SAID.finditer(text)}
        if all(k in said for k in keys):
            break
        time.sleep(0.2)
    return {k: said.get(k, "not said") for k in keys}
