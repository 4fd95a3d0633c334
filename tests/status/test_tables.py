"""A key's fixed-base tables in the tracker (``msm_tables = "auto"``): each ``TablesChanged`` replaces what
``/status`` says of that key's tables (``tables``, by key name); a state outside ``TABLES_STATES``, bytes
on tables not stored or a reason on tables that are used is illegal, and changes nothing."""

from __future__ import annotations

import pytest

from prooflane import events as ev
from prooflane.errors import IllegalTransition
from prooflane.status.tracker import StatusTracker, TrackerConfig
from tests.support.clock import ManualClock


def _tracker() -> tuple[StatusTracker, ManualClock]:
    clock = ManualClock(100.0)
    return StatusTracker(TrackerConfig(sample_rss=False), clock=clock, strict=True), clock


def test_each_change_replaces_what_status_says_of_the_key_and_keys_are_listed_by_name() -> None:
    t, clock = _tracker()
    assert t.snapshot().tables == () and t.snapshot().to_json()["tables"] == []
    t.apply(ev.TablesChanged(at=clock.now, key="window-post@tiny/bn128", state="building"))
    t.apply(
        ev.TablesChanged(at=clock.now, key="circom:merkle", state="unused", reason="the build failed: EIO")
    )
    t.apply(ev.TablesChanged(at=clock.now, key="window-post@tiny/bn128", state="stored", nbytes=5 << 20))
    assert t.snapshot().to_json()["tables"] == [
        {"key": "circom:merkle", "state": "unused", "bytes": 0, "reason": "the build failed: EIO"},
        {"key": "window-post@tiny/bn128", "state": "stored", "bytes": 5 << 20, "reason": ""},
    ]
    assert t.invariants() == []


@pytest.mark.parametrize(
    ("state", "nbytes", "reason"),
    [("ready", 0, ""), ("stored", 0, ""), ("building", 10, ""), ("unused", 0, ""), ("stored", 10, "why"),
     ("stored", -1, "")],
)  # fmt: skip
def test_an_event_that_does_not_add_up_is_illegal_and_changes_nothing(
    state: str, nbytes: int, reason: str
) -> None:
    t, clock = _tracker()
    t.apply(ev.TablesChanged(at=clock.now, key="k", state="building"))
    with pytest.raises(IllegalTransition, match="tables of k"):
        t.apply(ev.TablesChanged(at=clock.now, key="k", state=state, nbytes=nbytes, reason=reason))
    assert [(x.key, x.state) for x in t.snapshot().tables] == [("k", "building")]


def test_a_worker_holding_tables_that_status_says_are_not_stored_breaks_an_invariant() -> None:
    t, clock = _tracker()
    key, worker = "window-post@tiny/bn128", "cpu:0/w0"
    t.apply(ev.TablesChanged(at=clock.now, key=key, state="building"))
    t.apply(ev.AllocationCached(at=clock.now, name=ev.key_allocation(key, worker), nbytes=10))
    t.apply(
        ev.AllocationCached(at=clock.now, name=ev.key_allocation("circom:a", worker, tables=True), nbytes=9)
    )
    assert t.invariants() == []  # the key alone; and tables of a key not listed (msm_tables = true)
    held = ev.key_allocation(key, worker, tables=True)
    t.apply(ev.AllocationCached(at=clock.now, name=held, nbytes=30))
    assert t.invariants() == [f"allocation {held} holds the tables of {key}, which are building, not stored"]
    assert t.snapshot().invariants_ok is False
    t.apply(ev.TablesChanged(at=clock.now, key=key, state="stored", nbytes=20))
    assert t.invariants() == []
