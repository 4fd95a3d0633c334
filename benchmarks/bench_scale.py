"""A key at scale: a BN254 square chain of about 2^20 rows, proved whole-process and by a two-worker daemon.

The circuit is bench_prove's square chain with a development key (made once and cached under
benchmarks/results/; about 4 minutes at 2^20 on two cores). Measured:

- `prooflane prove` and rapidsnark's standalone prover (when ../shared/peers/rapidsnark/prover or
  $RAPIDSNARK is an executable), whole processes, cold, in turns: first `prooflane prove` with an empty
  memory of checked points (the key never seen: every check runs), then ``--repeat`` rounds of both;
- a real `prooflane serve` with two devices of one worker each (a fresh data folder and memory of checked
  points) that registers the circuit by path (its checks run then) and proves two one-partition circom jobs
  at once, so that both workers hold the key. The proportional set size (PSS: each shared page counted
  once over the processes that share it) of the daemon and every process it started is sampled every
  0.5 s, the peak of each phase: idle, registering, registered, proving, after; the peak while proving less
  the idle figure is what holding the key costs the machine, given over the key file's size.

Prints a table; writes benchmarks/results/bench_scale.json. Asserts nothing.

Also the PSS of the key file's own mapped pages summed over the processes (what holding the key's points
costs: one copy however many processes map it), and each process's PSS once the jobs are done.

Usage: ``python benchmarks/bench_scale.py [--constraints 1040000] [--repeat 1] [--daemon-only]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import RESULTS, claim_cpu, print_table, tree, tree_pss, write_json
from bench_prove import PROOFLANE, inputs, rapidsnark_binary, timed_process, verifies
from prooflane.cli.daemon_process import DaemonProcess
from prooflane.client import Client
from prooflane.groth16 import BN128, read_zkey

MIB = 1 << 20


def _pss(pid: int) -> int:
    """The summed PSS of process ``pid`` and every process below it (0 once it has ended)."""
    try:
        return tree_pss(tree(psutil.Process(pid)))
    except psutil.Error:
        return 0


def _mapped_pss(pid: int, path: Path) -> int:
    """The summed PSS of the mappings of .zkey files named as ``path`` in process ``pid`` and every
    process below it (the daemon keeps its own copy of a registered key under its data folder): the
    machine's memory for the key file's pages, however many processes map them."""
    total, wanted = 0, path.name
    try:
        processes = tree(psutil.Process(pid))
    except psutil.Error:
        return 0
    for process in processes:
        with contextlib.suppress(psutil.Error):
            total += sum(m.pss for m in process.memory_maps(grouped=True) if Path(m.path).name == wanted)
    return total


def _by_process(pid: int) -> list[dict[str, Any]]:
    """Each process of the tree: its command line's tail and its PSS."""
    rows = []
    with contextlib.suppress(psutil.Error):
        for process in tree(psutil.Process(pid)):
            with contextlib.suppress(psutil.Error):
                rows.append(
                    {"cmd": " ".join(process.cmdline()[-2:])[-80:], "pss": process.memory_full_info().pss}
                )
    return rows


class PssSampler:
    """Samples the PSS of one process tree in a thread; ``mark(label)`` starts a new phase."""

    def __init__(self, pid: int, key: Path, every: float = 0.5) -> None:
        self.pid = pid
        self.key = key
        self.every = every
        self.peaks: dict[str, int] = {}
        self.key_peaks: dict[str, int] = {}  # the key file's mapped pages only
        self.phase = "start"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            pss, mapped = _pss(self.pid), _mapped_pss(self.pid, self.key)
            self.peaks[self.phase] = max(self.peaks.get(self.phase, 0), pss)
            self.key_peaks[self.phase] = max(self.key_peaks.get(self.phase, 0), mapped)
            self._stop.wait(self.every)

    def mark(self, phase: str) -> None:
        self.peaks[phase] = _pss(self.pid)
        self.key_peaks[phase] = _mapped_pss(self.pid, self.key)
        self.phase = phase

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def whole_processes(zkey: Path, wtns: Path, repeat: int) -> dict[str, Any]:
    """prooflane's CLI (once with nothing remembered, then ``repeat`` times) and rapidsnark, in turns."""
    out: dict[str, Any] = {}
    proof, public = RESULTS / "scale-proof.json", RESULTS / "scale-public.json"
    cli = [str(PROOFLANE), "prove", str(zkey), str(wtns), "--proof", str(proof), "--public", str(public)]
    with tempfile.TemporaryDirectory(prefix="prooflane-point-checks-") as memo:
        env = dict(os.environ, PROOFLANE_POINT_CHECKS=memo)
        wall, cpu, _ = timed_process(cli, env)
        out.update(cli_unseen_key_s=wall, cli_unseen_key_cpu_s=cpu)
        provers: dict[str, tuple[list[str], dict[str, str] | None]] = {"cli": (cli, env)}
        rapidsnark = rapidsnark_binary()
        if rapidsnark is not None:
            provers["rapidsnark"] = ([str(rapidsnark), str(zkey), str(wtns), str(proof), str(public)], None)
        runs: dict[str, list[tuple[float, float, str]]] = {name: [] for name in provers}
        for round_ in range(repeat):
            order = list(provers) if round_ % 2 == 0 else list(reversed(provers))  # alternate who goes first
            for name in order:
                cmd, environment = provers[name]
                runs[name].append(timed_process(cmd, environment))
                if name == "rapidsnark":
                    out["rapidsnark_proof_verifies"] = verifies(zkey, proof, public)
    for name, results in runs.items():
        out[f"{name}_s"] = statistics.median(r[0] for r in results)
        out[f"{name}_cpu_s"] = statistics.median(r[1] for r in results)
        out[f"{name}_runs_s"] = [round(r[0], 3) for r in results]
    if out.get("rapidsnark_s"):
        out["rapidsnark_ratio"] = out["rapidsnark_s"] / out["cli_s"]
    return out


def daemon_memory(zkey: Path, wtns: Path) -> dict[str, Any]:
    """A two-worker daemon registers the circuit and proves two jobs at once; its PSS in each phase."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="prooflane-scale-") as tmp:
        os.environ["PROOFLANE_POINT_CHECKS"] = str(Path(tmp) / "point-checks")  # nothing seen before
        config = Path(tmp) / "prooflane.toml"
        config.write_text(
            f"allowed_roots = {json.dumps([str(zkey.parent.resolve())])}\n"
            'devices = ["cpu:0", "cpu:1"]\nworkers_per_device = 1\n'
        )
        with (
            DaemonProcess(Path(tmp) / "data", profile="tiny", config_file=config) as daemon,
            Client(daemon.url, timeout=3600) as client,
        ):
            sampler = PssSampler(daemon.pid, zkey)
            try:
                sampler.mark("idle")
                time.sleep(2 * sampler.every)
                sampler.mark("registering")
                start = time.perf_counter()
                client.register_circuit("chain", zkey)
                out["register_s"] = time.perf_counter() - start
                sampler.mark("registered")
                time.sleep(2 * sampler.every)
                sampler.mark("proving two jobs")
                start = time.perf_counter()
                jobs = [client.submit("circom", circuit="chain", witnesses=[str(wtns)]) for _ in range(2)]
                for job in jobs:
                    if client.proof(job, wait=3600) is None:
                        raise RuntimeError(f"job {job} gave no proof: {client.job(job)}")
                out["two_jobs_s"] = time.perf_counter() - start
                sampler.mark("after")
                time.sleep(2 * sampler.every)
                workers = client.status()["workers"]
                out["workers"] = [w["worker_id"] for w in workers]
                out["after_by_process"] = _by_process(daemon.pid)
            finally:
                sampler.stop()
            out["pss_bytes"] = dict(sampler.peaks)
            out["key_file_pss_bytes"] = dict(sampler.key_peaks)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--constraints", type=int, default=1_040_000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--daemon-only", action="store_true", help="skip the whole-process provers")
    args = parser.parse_args()
    zkey, wtns, source = inputs(BN128, args.constraints)
    key = read_zkey(zkey)
    row: dict[str, Any] = {
        "constraints": args.constraints,
        "domain": key.domain_size,
        "zkey_bytes": zkey.stat().st_size,
        "source": source,
        "load_average": os.getloadavg(),
    }
    del key
    if not args.daemon_only:
        row.update(whole_processes(zkey, wtns, args.repeat))
    row.update(daemon_memory(zkey, wtns))
    pss = row["pss_bytes"]
    # What proving costs the machine: the peak while both workers prove over the idle daemon (the key's
    # pages and each proof's working memory); the key file's own pages, however many processes map them.
    row["key_pss_bytes"] = pss.get("proving two jobs", 0) - pss.get("idle", 0)
    row["key_pss_over_key"] = row["key_pss_bytes"] / row["zkey_bytes"]
    row["key_file_pss_over_key"] = max(row["key_file_pss_bytes"].values()) / row["zkey_bytes"]
    print_table(
        ["domain", "zkey MiB", "unseen key", "prooflane prove", "rapidsnark", "x rapidsnark", "register",
         "two jobs", "PSS idle", "registering", "registered", "proving", "after", "(proving-idle) / key",
         "key file PSS / key"],
        [[row["domain"], row["zkey_bytes"] / MIB, row.get("cli_unseen_key_s", "-"), row.get("cli_s", "-"),
          row.get("rapidsnark_s", "-"), row.get("rapidsnark_ratio", "-"), row["register_s"],
          row["two_jobs_s"], *(row["pss_bytes"].get(p, 0) / MIB for p in
                                ("idle", "registering", "registered", "proving two jobs", "after")),
          row["key_pss_over_key"], row["key_file_pss_over_key"]]],
    )  # fmt: skip
    for process in row["after_by_process"]:
        print(f"  after: {process['pss'] / MIB:8.1f} MiB  {process['cmd']}")
    print(
        "seconds and MiB; whole processes, cold (unseen key: nothing remembered, every check runs); "
        "x rapidsnark = rapidsnark's time / prooflane's; PSS: the daemon and every process it started "
        "(two devices of one worker), peak of each phase"
    )
    write_json("bench_scale", row)


if __name__ == "__main__":
    with claim_cpu():
        main()
