"""`/status` tells the truth under a real load: sampled every 20 ms for the whole run.

In every sample: each proving partition is the current partition of exactly one proving worker and each
proving worker's partition is proving; no worker shows idle while a partition it holds is proving or
finalizing; active synthesis equals the partitions synthesizing; invariants_ok holds; seq never goes back
and jobs keep their order. At the end the counters equal what the journal holds.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from prooflane.cli.daemon_process import DaemonProcess
from prooflane.client import Client
from prooflane.models import InlineSector, JobView
from tests.support.daemons import circom_files, running, start_daemon, wait_done, wait_until

SAMPLE_SECS = 0.02
LOAD = ["porep-c2", "window-post", "snap-update", "winning-post", "window-post", "porep-c2"]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    yield from running(start_daemon(tmp_path_factory, "status"))


class Sampler(threading.Thread):
    """GET /status every 20 ms until stopped, checking each sample as it arrives."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.stop = threading.Event()
        self.samples = 0
        self.saw_proving = 0
        self.problems: list[str] = []
        self._last_seq: dict[str, int] = {}
        self._order: list[str] = []

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as http:
            while not self.stop.wait(SAMPLE_SECS):
                snapshot = http.get("/status").json()
                self.samples += 1
                self.problems += [f"seq {snapshot['seq']}: {p}" for p in self.check(snapshot)]

    def check(self, s: dict[str, Any]) -> list[str]:
        problems = check_sample(s)
        if s["seq"] < self._last_seq.get(s["boot_id"], 0):
            problems.append(f"seq went back from {self._last_seq[s['boot_id']]}")
        self._last_seq[s["boot_id"]] = s["seq"]
        order = [p["job_id"] for p in s["pipelines"]]
        kept = [job for job in self._order if job in order]
        if kept != [job for job in order if job in kept]:
            problems.append(f"jobs changed order: {kept} then {order}")
        self._order = order
        self.saw_proving += any(w["state"] == "proving" for w in s["workers"])
        return problems


def check_sample(s: dict[str, Any]) -> list[str]:
    """What is wrong with one snapshot (nothing, when it tells the truth)."""
    problems = [] if s["invariants_ok"] else [f"invariants_ok is false: {s.get('invariant_violations')}"]
    workers = {w["worker_id"]: w for w in s["workers"]}
    parts = {(p["job_id"], part["index"]): part for p in s["pipelines"] for part in p["partitions"]}
    proving_parts = {key for key, part in parts.items() if part["state"] == "proving"}
    proving_workers = [w for w in workers.values() if w["state"] == "proving"]
    for key in proving_parts:
        holders = [w for w in proving_workers if (w["current_job"], w["current_partition"]) == key]
        if len(holders) != 1:
            problems.append(f"partition {key} is proving but {len(holders)} proving workers hold it")
    for w in proving_workers:
        key = (w["current_job"], w["current_partition"])
        if key not in proving_parts:
            problems.append(
                f"worker {w['worker_id']} is proving {key}, which is {parts.get(key, {}).get('state')}"
            )
    for key, part in parts.items():
        holder = workers.get(part["worker_id"]) if part["worker_id"] else None
        if part["state"] in ("proving", "finalizing") and (holder is None or holder["state"] == "idle"):
            problems.append(f"partition {key} is {part['state']} but its worker {part['worker_id']} is idle")
        if part["state"] == "finalizing" and holder is not None:
            held = {(f["job_id"], f["partition"]) for f in holder["finalizing"]}
            if key not in held:
                problems.append(
                    f"partition {key} is finalizing but not in {holder['worker_id']}'s finalizing"
                )
    synthesizing = sum(part["state"] == "synthesizing" for part in parts.values())
    if s["synthesis"]["active"] != synthesizing:
        problems.append(
            f"synthesis active {s['synthesis']['active']} but {synthesizing} partitions synthesizing"
        )
    return problems


def test_status_tells_the_truth_in_every_sample_under_load(daemon: DaemonProcess, tmp_path: Path) -> None:
    sampler = Sampler(daemon.url)
    sampler.start()
    with Client(daemon.url) as client:
        ids = [
            client.submit(kind, sector=InlineSector(size=256, seed=f"{n + 1:064x}"))
            for n, kind in enumerate(LOAD)
        ]
        files = circom_files(tmp_path)
        client.register_circuit("wp", files["zkey"])
        witnesses: list[str | dict[str, Any]] = [str(files["good"]), str(files["bad"])]
        broken = client.submit("circom", circuit="wp", witnesses=witnesses)
        doomed = client.submit("porep-c2", sector=InlineSector(size=256, seed="ff" * 32))
        wait_until("the doomed job to start", lambda: client.job(doomed).partitions_done >= 1)
        client.cancel(doomed)
        views = wait_done(client, [*ids, broken, doomed])
        sampler.stop.set()
        sampler.join()
        final = client.status()
        journal = every_job(client)
    assert sampler.problems == []
    assert sampler.samples > 0
    assert sampler.saw_proving > 0, "no sample caught a worker proving: the load never ran"
    assert [v.state for v in views] == ["done"] * len(LOAD) + ["failed", "cancelled"]
    assert views[-2].error is not None
    assert "partition 1" in views[-2].error
    assert check_sample(final) == []
    counters = final["counters"]
    states = Counter(v.state.value for v in journal)
    assert (counters["total_completed"], counters["total_failed"], counters["total_cancelled"]) == (
        states["done"],
        states["failed"],
        states["cancelled"],
    )
    assert counters["completed_by_kind"] == dict(Counter(v.kind for v in journal if v.state == "done"))
    assert counters["failed_by_kind"] == dict(Counter(v.kind for v in journal if v.state == "failed"))
    assert counters["queue_depth"] == 0


def every_job(client: Client) -> list[JobView]:
    """Every job of the journal, newest first, a page at a time."""
    jobs: list[JobView] = []
    while page := client.jobs(limit=1000, before=jobs[-1].job_id if jobs else None):
        jobs += page
    return jobs
