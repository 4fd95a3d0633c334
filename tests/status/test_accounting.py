"""Memory and time accounting: reservations, cached keys, what the budget holds, the process tree's RSS,
busy seconds and fractions, history and throughput."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prooflane import events as ev
from prooflane.errors import IllegalTransition
from prooflane.status.rss import ProcessMemory
from prooflane.status.timing import DeviceBusy
from prooflane.status.tracker import Outcome
from tests.support.tracker import Script, worker_of

# --- memory ------------------------------------------------------------------------------------------------


def test_reservations_partial_release_and_budget() -> None:
    s = Script(memory_total_bytes=1000)
    s(ev.ReservationMade, name="A/0", nbytes=600)
    s(ev.ReservationShrunk, name="A/0", nbytes=400)
    s(ev.AllocationCached, name="key:porep-c2", nbytes=100)
    memory = s.status()["memory"]
    assert (memory["total_bytes"], memory["reserved_bytes"], memory["available_bytes"]) == (1000, 200, 700)
    s(ev.ReservationReleased, name="A/0")
    assert s(ev.ReservationReleased, name="A/0") is Outcome.STALE
    s(ev.BudgetSet, total_bytes=2000)
    memory = s.status()["memory"]
    assert (memory["total_bytes"], memory["reserved_bytes"], memory["available_bytes"]) == (2000, 0, 1900)


def test_shrinking_a_reservation_below_zero_is_illegal() -> None:
    s = Script()
    s(ev.ReservationMade, name="A/0", nbytes=10)
    with pytest.raises(IllegalTransition, match=r"expected 0\.\.10 bytes, got 11"):
        s(ev.ReservationShrunk, name="A/0", nbytes=11)


def test_allocations_show_size_and_idle_time() -> None:
    s = Script()
    s(ev.AllocationCached, name="key:snap-update", nbytes=4096, evictable=False)
    s.clock.advance(3.0)
    s(ev.AllocationUsed, name="key:snap-update")
    s.clock.advance(2.0)
    assert s.status()["allocations"] == [
        {"name": "key:snap-update", "bytes": 4096, "last_used_secs_ago": 2.0, "evictable": False}
    ]
    s(ev.AllocationEvicted, name="key:snap-update")
    assert s(ev.AllocationUsed, name="key:snap-update") is Outcome.STALE
    assert s.status()["allocations"] == []


# --- time accounting ---------------------------------------------------------------------------------------


def test_busy_seconds_come_from_lease_intervals(s: Script) -> None:
    s.job("A", partitions=2)
    s.synthesize("A", 1)
    token = s.start("W0", "A", 0)
    s.clock.advance(4.0)
    w0 = worker_of(s.status(), "W0")
    assert (w0["busy_secs"], w0["busy_seconds_total"]) == (4.0, 4.0)
    s.prove_end(token)
    s.clock.advance(2.0)
    w0 = worker_of(s.status(), "W0")
    assert (w0["state"], w0["busy_secs"], w0["busy_seconds_total"]) == ("finalizing", 0.0, 4.0)
    s.lease("W0", "A", 1)
    s.clock.advance(1.0)
    assert worker_of(s.status(), "W0")["busy_seconds_total"] == 5.0
    assert s.tracker.totals().worker_busy_seconds["W0"] == 5.0


def test_device_busy_fraction_counts_overlapping_workers_once() -> None:
    s = Script()
    s.clock.now = 6000.0  # the start of a minute, so the history's current minute is whole
    s.worker("W0")
    s.worker("W1")
    s.job("A", partitions=2)
    s.synthesize("A", 0)
    s.synthesize("A", 1)
    s.clock.advance(28.0)  # now 30 s into the device's life
    a0 = s.lease("W0", "A", 0)
    a1 = s.lease("W1", "A", 1)
    s.clock.advance(15.0)
    s.prove_end(a0)
    s.clock.advance(15.0)
    s.prove_end(a1)
    status = s.status()
    device = {"device": "cpu0", "kind": "cpu", "busy_fraction_1m": 0.5, "workers": 2}
    assert status["devices"] == [device | {"workers_down": 0, "node": None, "memory": None}]
    assert status["history"]["busy_fraction_per_minute"][-2:] == [0.5, 0.0]  # a new minute began
    assert len(status["history"]["busy_fraction_per_minute"]) == 60


def test_history_counts_proofs_and_partitions_per_minute(s: Script) -> None:
    s.job("A", partitions=1)
    token = s.start("W0", "A", 0)
    s.prove_end(token)
    s.finalize(token)
    s(ev.JobDone, job_id="A")
    s.clock.advance(60.0)
    history = s.status()["history"]
    assert history["proofs_per_minute"][-2:] == [1, 0]
    assert history["partitions_per_minute"][-2:] == [1, 0]
    recent = s.status()["recent_partitions"]
    assert recent == [
        {
            "job_id": "A",
            "proof_kind": "porep-c2",
            "index": 0,
            "synth_ms": 1000.0,
            "prove_ms": 500.0,
            "finalize_ms": 250.0,
        }
    ]


# --- what the memory headline counts ----------------------------------------------------------------------


def test_memory_used_is_everything_the_budget_holds() -> None:
    s = Script(memory_total_bytes=40 << 20)
    s(ev.AllocationCached, name="key:porep-c2-tiny@cpu:0/w0", nbytes=30 << 20)
    s(ev.AllocationCached, name="key:snap-update-tiny@cpu:0/w1", nbytes=5 << 20)
    memory = s.status()["memory"]
    # No reservation live, yet the budget is 87.5% held: by cached keys.
    assert (memory["reserved_bytes"], memory["cached_bytes"], memory["used_bytes"]) == (0, 35 << 20, 35 << 20)
    s(ev.ReservationMade, name="A/0", nbytes=4 << 20)
    memory = s.status()["memory"]
    assert memory["used_bytes"] == memory["reserved_bytes"] + memory["cached_bytes"] == 39 << 20
    assert memory["available_bytes"] == memory["total_bytes"] - memory["used_bytes"] == 1 << 20
    s(ev.AllocationEvicted, name="key:porep-c2-tiny@cpu:0/w0")
    assert s.status()["memory"]["used_bytes"] == 9 << 20


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    """A child process of this one (a worker of the daemon, say), ended after the test."""
    process = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        yield process
    finally:
        process.communicate(b"")


def test_tree_rss_sums_the_daemon_and_its_descendants(child: subprocess.Popen[bytes]) -> None:
    s = Script(sample_rss=True)
    memory = s.status()["memory"]
    assert memory["process_rss_bytes"] > 0
    assert memory["tree_rss_bytes"] > memory["process_rss_bytes"]  # the child's memory counts too


def test_the_process_tree_is_walked_at_most_once_a_second_and_only_at_a_new_seq(
    child: subprocess.Popen[bytes],
) -> None:
    memory = ProcessMemory()
    first = memory.sample(100.0, seq=1)
    assert first.tree > first.process > 0
    child.communicate(b"")  # the child ends: a walk from now on no longer counts it
    assert memory.sample(100.5, seq=2).tree == first.tree  # within a second: the same walk
    assert memory.sample(500.0, seq=2).tree == first.tree  # the same seq: the same figure, however late
    later = memory.sample(500.0, seq=3)
    assert later.tree - later.process < first.tree - first.process  # walked again, without the child


# --- throughput -------------------------------------------------------------------------------------------


def test_throughput_is_per_hour_over_the_last_minute_and_ten() -> None:
    s = Script()
    s.worker("W0")
    for n in range(3):  # three proofs of a partition each, in the tracker's first seconds
        s.prove_job(f"A{n}")
    s.clock.advance(70.0)
    status = s.status()
    history = status["history"]
    assert history["proofs_per_hour_1m"] == history["partitions_per_hour_1m"] == 0.0  # none in the last 60 s
    # The tracker is younger than ten minutes: the long window is its life.
    assert history["proofs_per_hour_10m"] == pytest.approx(3 * 3600 / status["uptime_secs"])
    assert history["partitions_per_hour_10m"] == history["proofs_per_hour_10m"]
    s.prove_job("B", kind="snap-update")
    assert s.status()["history"]["proofs_per_hour_1m"] == 60.0  # one proof in the last 60 s
    s.clock.advance(600.0)
    s.prove_job("C")
    history = s.status()["history"]
    assert history["proofs_per_hour_1m"] == 60.0
    assert history["proofs_per_hour_10m"] == 6.0  # the others left the window: C alone over 600 s


@given(
    st.lists(
        st.tuples(st.floats(0, 30, allow_nan=False), st.floats(0, 20, allow_nan=False), st.booleans()),
        max_size=60,
    )
)
def test_the_busy_fraction_kept_with_its_total_equals_the_sum_of_the_minute(
    steps: list[tuple[float, float, bool]],
) -> None:
    """Intervals open and close, reads come in between (the clock only moves on): each read equals the sum
    over every closed interval's overlap with the last minute, as the fraction was computed before its
    total was kept."""
    busy = DeviceBusy("cpu:0", "cpu", since=0.0)
    closed: list[tuple[float, float]] = []
    now = 0.0
    for gap, length, read in steps:
        now += gap
        busy.start(now)
        opened = now
        now += length
        interval = busy.stop(now)
        assert interval == (opened, now)
        closed.append(interval)
        if read:
            now += gap / 3
            start = max(now - 60.0, 0.0)
            naive = sum(max(0.0, min(e, now) - max(s, start)) for s, e in closed)
            expected = min(1.0, naive / (now - start)) if now > start else 0.0
            assert busy.fraction(now) == pytest.approx(expected, abs=1e-9)
