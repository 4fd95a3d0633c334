"""A worker's prover SIGKILLed at the moment its worker proves one partition while its finalizer finishes
another, again and again, under a stream of jobs: at the end the live view (``/status``) and the journal
agree on every job, nothing waits, and the daemon's own comparison never found them apart.

(The interleavings themselves, step by step, are in ``tests/engine/test_outcomes.py``.)
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from prooflane.circuits.profiles import profile_by_name
from prooflane.client import Client
from prooflane.models import InlineSector
from prooflane.testing.checks import check_final, check_journal
from prooflane.testing.faults import ProcessKind, daemon_tree, kill_and_wait
from tests.support.daemons import TIMEOUT, start_daemon, wait_done, wait_until

KILLS = 12
# One worker (its prover is the one prover of the tree); each kill blames the partition proving, which may be
# the same one again and again: allowed, so that every job still ends done.
CONFIG = 'devices = ["cpu:0"]\nmax_attempts = 100\n'
# With a finalizer beside the prover (a cuda device's layout, asked for on a cpu one), the finalizer of one
# partition runs while the prover proves the next.
SPLIT = CONFIG + "split_prove = true\n"
MIX = ("porep-c2", "winning-post")  # ten partitions, one: each finalizer overlaps the next device section


def proving_while_finalizing(status: dict[str, Any]) -> bool:
    (worker,) = status["workers"]
    return worker["state"] == "proving" and bool(worker["finalizing"])


def synthesizing_its_own(status: dict[str, Any]) -> bool:
    (worker,) = status["workers"]
    return bool(worker["state"] == "synthesizing")


@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    ("profile", "config", "moment"),
    [
        ("tiny", SPLIT, proving_while_finalizing),
        ("small", SPLIT, proving_while_finalizing),
        ("small", CONFIG, synthesizing_its_own),  # a cpu worker's own layout: killed as it synthesizes
    ],
    ids=["tiny-split", "small-split", "small-own-synthesis"],
)
def test_provers_killed_while_their_finalizer_holds_a_partition_leave_no_phantom_job(
    tmp_path_factory: pytest.TempPathFactory,
    profile: str,
    config: str,
    moment: Callable[[dict[str, Any]], bool],
) -> None:
    daemon = start_daemon(tmp_path_factory, f"phantoms-{profile}", extra_config=config, profile=profile)
    with contextlib.ExitStack() as stack:
        stack.callback(daemon.stop)
        url = daemon.url
        client = stack.enter_context(Client(url))
        sector = InlineSector(size=profile_by_name(profile).sector_bytes, seed="07")
        job_ids: list[str] = []
        kills = 0
        numbers = itertools.count()
        deadline = time.monotonic() + TIMEOUT
        with httpx.Client(base_url=url, timeout=30) as http:
            while kills < KILLS:
                assert time.monotonic() < deadline, (
                    f"only {kills} kills at the moment looked for: {daemon.log()}"
                )
                status = http.get("/status").json()
                if status["counters"]["queue_depth"] < 4:  # keep a stream of jobs coming
                    n = next(numbers)
                    job_ids.append(client.submit(MIX[n % 2], sector=sector, job_id=f"p-{n:04}"))
                if not moment(status):
                    continue
                provers = [p for p in daemon_tree(daemon.pid) if p.kind is ProcessKind.PROVER]
                if provers and kill_and_wait(provers[0].pid):
                    kills += 1
            views = wait_done(client, job_ids)
            assert {v.job_id: v.state.value for v in views} == dict.fromkeys(job_ids, "done")
            checked_before = time.monotonic()

            def compared_since_the_drain() -> bool:
                ago = http.get("/status").json()["journal_check"]["checked_secs_ago"]
                return ago is not None and ago < time.monotonic() - checked_before

            wait_until("the daemon compares its live view with the journal", compared_since_the_drain)
            status = http.get("/status").json()
        assert check_journal(status, daemon.data_dir / "journal.sqlite3") == []
        listed = {job["job_id"]: job["state"] for job in status["pipelines"]}
        assert set(listed.values()) <= {"done"}, listed
        assert status["live_jobs"]["running"] == status["live_jobs"]["queued"] == 0
        assert status["counters"]["queue_depth"] == 0
        assert status["invariants_ok"], status["invariant_violations"]
        assert status["journal_check"]["disagreed"] == 0
        assert check_final(status) == []
        metrics = httpx.get(f"{url}/metrics").text
        assert "prooflane_queue_depth 0" in metrics
        assert "prooflane_journal_disagreements_total 0" in metrics
        assert status["workers"][0]["restarts"] >= KILLS
