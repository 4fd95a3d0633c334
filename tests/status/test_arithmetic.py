"""The arithmetic per curve: given once to the tracker, served whole in ``/status``, and a curve on the
libraries is a health warning that never makes the daemon unhealthy."""

from __future__ import annotations

from prooflane import events as ev
from prooflane.status.readout import arithmetic_warnings
from prooflane.status.tracker import StatusTracker, TrackerConfig
from tests.support.clock import ManualClock

FAST = {"bn128": "c-extension", "bls12381": "c-extension"}
SLOW = {"bn128": "libraries: PROOFLANE_NATIVE=0", "bls12381": "libraries: PROOFLANE_NATIVE=0"}


def _tracker(arithmetic: dict[str, str]) -> StatusTracker:
    tracker = StatusTracker(TrackerConfig(sample_rss=False, arithmetic=arithmetic), clock=ManualClock(1.0))
    tracker.apply(ev.WorkerRegistered(at=1.0, worker_id="cpu0/w0", device="cpu0"))
    return tracker


def test_the_c_extension_everywhere_is_served_and_warns_of_nothing() -> None:
    tracker = _tracker(FAST)
    doc = tracker.snapshot().to_json()
    assert doc["arithmetic"] == FAST
    assert doc["health"] == {"ok": True, "reasons": [], "devices_down": [], "warnings": []}


def test_the_libraries_are_a_warning_and_the_daemon_stays_healthy() -> None:
    tracker = _tracker(SLOW)
    health = tracker.health()
    assert health.ok and health.reasons == ()
    assert health.warnings == (
        "bn128 and bls12381 prove on the libraries, the slower arithmetic (PROOFLANE_NATIVE=0)",
    )
    doc = tracker.snapshot().to_json()
    assert doc["arithmetic"] == SLOW
    assert doc["health"]["ok"] is True and doc["health"]["warnings"] == list(health.warnings)


def test_warnings_stay_when_reasons_are_added_and_reasons_still_decide_ok() -> None:
    tracker = _tracker(SLOW)
    stalled = tracker.health("queue stalled for 300 s")
    assert (stalled.ok, stalled.reasons) == (False, ("queue stalled for 300 s",))
    assert stalled.warnings == tracker.health().warnings != ()


def test_one_warning_per_reason_naming_its_curves() -> None:
    mixed = {"bn128": "c-extension", "bls12381": "libraries: the C extension has no BLS12-381 here"}
    assert arithmetic_warnings(mixed) == (
        "bls12381 proves on the libraries, the slower arithmetic (the C extension has no BLS12-381 here)",
    )
    assert arithmetic_warnings({}) == ()  # not said (a tracker without an engine): nothing to warn of


def test_the_arithmetic_is_a_copy_the_caller_cannot_change_afterwards() -> None:
    given = dict(FAST)
    tracker = _tracker(given)
    given["bn128"] = "libraries: changed"
    assert tracker.snapshot().arithmetic == FAST
