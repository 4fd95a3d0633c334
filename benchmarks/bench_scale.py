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

Usage: ``python benchmarks/bench_scale.py [--constraints 1040000] [--repeat 1]``.
"""

from __future__ import annotations

import argparse
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


class PssSampler:
    """Samples the PSS of one process tree in a thread; ``mark(label)`` starts a new phase."""

    def __init__(self, pid: int, every: float = 0.5) -> None:
        self.pid = pid
        self.every = every
        self.peaks: dict[str, int] = {}
        self.phase = "start"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            pss = _pss(self.pid)
            self.peaks[self.phase] = max(self.peaks.get(self.phase, 0), pss)
            self._stop.wait(self.every)

    def mark(self, phase: str) -> None:
        self.peaks[phase] = _pss(self.pid)
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
            sampler = PssSampler(daemon.pid)
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
            finally:
                sampler.stop()
            out["pss_bytes"] = dict(sampler.peaks)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--constraints", type=int, default=1_040_000)
    parser.add_argument("--repeat", type=int, default=1)
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
    row.update(whole_processes(zkey, wtns, args.repeat))
    row.update(daemon_memory(zkey, wtns))
    pss = row["pss_bytes"]
    # What holding the key costs the machine: the peak while both workers prove over the idle daemon.
    row["key_pss_bytes"] = pss.get("proving two jobs", 0) - pss.get("idle", 0)
    row["key_pss_over_key"] = row["key_pss_bytes"] / row["zkey_bytes"]
    print_table(
        ["domain", "zkey MiB", "unseen key", "prooflane prove", "rapidsnark", "x rapidsnark", "register",
         "two jobs", "PSS idle", "registering", "registered", "proving", "after", "(proving-idle) / key"],
        [[row["domain"], row["zkey_bytes"] / MIB, row["cli_unseen_key_s"], row["cli_s"],
          row.get("rapidsnark_s", "-"), row.get("rapidsnark_ratio", "-"), row["register_s"],
          row["two_jobs_s"], *(row["pss_bytes"].get(p, 0) / MIB for p in
                                ("idle", "registering", "registered", "proving two jobs", "after")),
          row["key_pss_over_key"]]],
    )  # fmt: skip
    print(
        "seconds and MiB; whole processes, cold (unseen key: nothing remembered, every check runs); "
        "x rapidsnark = rapidsnark's time / prooflane's; PSS: the daemon and every process it started "
        "(two devices of one worker), peak of each phase"
    )
    write_json("bench_scale", row)


if __name__ == "__main__":
    with claim_cpu():
        main()
