"""A daemon's worker on a circuit it has never seen: from receiving the first partition to its proof.

A real `prooflane serve` (default configuration, a fresh data folder and a fresh memory of checked points, so
the key is new to every process) registers a BN254 square chain of 2^15 rows (a development key made once and
cached under benchmarks/results/), then proves one 1-partition circom job, then a second one (warm). Timed
from the daemon's own event stream: ``lease_granted`` (a worker took the partition) to
``device_section_finished`` and to ``finalize_finished`` (the partition's proof made and verified); and
registration (which validates the key's points in full, once) and submit-to-proof as the client sees them.
Prints a table; writes benchmarks/results/bench_cold_worker.json. Asserts nothing.

Usage: ``python benchmarks/bench_cold_worker.py [--constraints N]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import RESULTS, claim_cpu, print_table, write_json
from bench_prove import square_chain
from prooflane.cli.daemon_process import DaemonProcess
from prooflane.client import Client, ServerEvent
from prooflane.groth16 import BN128, setup, write_wtns, write_zkey


def inputs(constraints: int) -> tuple[Path, Path]:
    """(zkey, wtns) of a BN254 square chain, made once."""
    folder = RESULTS / f"square_chain-{constraints}-bn128"
    zkey, wtns = folder / "circuit.zkey", folder / "witness.wtns"
    if not zkey.exists():
        folder.mkdir(parents=True, exist_ok=True)
        r1cs, witness = square_chain(BN128, constraints - 1)
        start = time.perf_counter()
        key = setup(r1cs, seed=b"bench_cold_worker")
        print(f"dev setup of bn128 ({constraints} constraints): {time.perf_counter() - start:.1f} s")
        write_wtns(wtns, witness)
        write_zkey(zkey, key)
    return zkey, wtns


class Events:
    """The daemon's event stream, collected in a thread."""

    def __init__(self, client: Client) -> None:
        self.seen: list[ServerEvent] = []
        self._stream = client.events()
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        with contextlib.suppress(Exception):  # the stream ends when the daemon stops
            for event in self._stream:
                self.seen.append(event)

    def at(self, name: str, job_id: str) -> float:
        """The daemon-clock time of the first ``name`` event of ``job_id``."""
        for event in list(self.seen):
            if event.name == name and isinstance(event.data, dict) and event.data.get("job_id") == job_id:
                return float(event.data["at"])
        raise LookupError(f"no {name} event for {job_id}")


def one_job(client: Client, events: Events, circuit: str, wtns: Path) -> dict[str, float]:
    start = time.perf_counter()
    job = client.submit("circom", circuit=circuit, witnesses=[str(wtns)])
    proof = client.proof(job, wait=600)
    wall = time.perf_counter() - start
    assert proof is not None
    for _ in range(100):  # the stream may trail the answer by a moment
        try:
            events.at("finalize_finished", job)
            break
        except LookupError:
            time.sleep(0.05)
    lease = events.at("lease_granted", job)
    return {
        "submit_to_proof_s": wall,
        "lease_to_device_done_s": events.at("device_section_finished", job) - lease,
        "lease_to_proof_s": events.at("finalize_finished", job) - lease,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--constraints", type=int, default=32000)
    args = parser.parse_args()
    zkey, wtns = inputs(args.constraints)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="prooflane-cold-worker-") as tmp:
        os.environ["PROOFLANE_POINT_CHECKS"] = str(Path(tmp) / "point-checks")  # nothing seen before
        config = Path(tmp) / "prooflane.toml"  # the daemon may read the circuit and witness made above
        config.write_text(f"allowed_roots = {json.dumps([str(zkey.parent.resolve())])}\n")
        with (
            DaemonProcess(Path(tmp) / "data", profile="tiny", config_file=config) as daemon,
            Client(daemon.url, timeout=600) as client,
        ):
            events = Events(client)
            start = time.perf_counter()
            client.register_circuit("chain", zkey)
            register_s = time.perf_counter() - start
            for label in ("first job (new key)", "second job"):
                rows.append({"job": label, "register_s": register_s if not rows else None})
                rows[-1].update(one_job(client, events, "chain", wtns))
    columns = [
        ("job", "job"),
        ("register_s", "register"),
        ("lease_to_device_done_s", "lease->device done"),
        ("lease_to_proof_s", "lease->proof"),
        ("submit_to_proof_s", "submit->proof"),
    ]
    print_table(
        [c[1] for c in columns],
        [[r.get(k) if r.get(k) is not None else "-" for k, _ in columns] for r in rows],
    )
    print(f"BN254, {args.constraints} constraints (domain 2^15 for 32000), one partition; seconds")
    write_json("bench_cold_worker", {"constraints": args.constraints, "results": rows})


if __name__ == "__main__":
    with claim_cpu():
        main()
