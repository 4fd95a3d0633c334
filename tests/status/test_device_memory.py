"""A device's own memory in the tracker: memory events that name a device go to that device's ledger, never
the host's; ``/status`` shows each budgeted device's total, resident keys and in-use bytes in its device
entry, ``/metrics`` exports them, and the invariant on reservations holds for every ledger."""

from __future__ import annotations

from typing import Any

import pytest

from prooflane import events as ev
from prooflane.errors import IllegalTransition
from prooflane.server.metrics import render
from prooflane.status.snapshot import DeviceMemoryStatus
from prooflane.status.tracker import StatusTracker, TrackerConfig
from tests.support.clock import ManualClock

GIB = 1 << 30


def tracker() -> tuple[StatusTracker, Any]:
    clock = ManualClock(100.0)
    t = StatusTracker(TrackerConfig(memory_total_bytes=GIB, sample_rss=False), clock=clock, strict=True)

    def send(cls: type[ev.EventBase], **fields: Any) -> None:
        event: Any = cls(at=clock.now, **fields)
        t.apply(event)

    send(ev.WorkerRegistered, worker_id="cuda:0/w0", device="cuda:0", device_kind="cuda")
    send(ev.WorkerRegistered, worker_id="cpu:0/w0", device="cpu:0")
    return t, send


def test_device_memory_is_kept_apart_from_the_host_budget_and_shown_per_device() -> None:
    t, send = tracker()
    send(ev.BudgetSet, total_bytes=16 * GIB, device="cuda:0")
    send(ev.AllocationCached, name="key:porep@cuda:0/w0", nbytes=3000, device="cuda:0")
    send(ev.AllocationUsed, name="key:porep@cuda:0/w0", device="cuda:0")
    send(ev.ReservationMade, name="j/0", nbytes=500, device="cuda:0")
    send(ev.ReservationMade, name="j/0", nbytes=7000)  # the host's reservation of the same partition
    snapshot = t.snapshot()
    devices = {d.device: d for d in snapshot.devices}
    assert devices["cuda:0"].memory == DeviceMemoryStatus(16 * GIB, 3000, 1, 500)
    assert devices["cpu:0"].memory is None
    assert snapshot.memory.total_bytes == GIB and snapshot.memory.reserved_bytes == 7000
    assert snapshot.memory.cached_bytes == 0 and snapshot.invariant_violations == ()
    text = render(t)
    assert 'prooflane_device_memory_total_bytes{device="cuda:0"} 17179869184' in text
    assert 'prooflane_device_memory_keys_bytes{device="cuda:0"} 3000' in text
    assert 'prooflane_device_memory_in_use_bytes{device="cuda:0"} 500' in text

    send(ev.ReservationReleased, name="j/0", device="cuda:0")
    send(ev.AllocationEvicted, name="key:porep@cuda:0/w0", device="cuda:0")
    devices = {d.device: d for d in t.snapshot().devices}
    assert devices["cuda:0"].memory == DeviceMemoryStatus(16 * GIB, 0, 0, 0)
    assert t.snapshot().memory.reserved_bytes == 7000  # the host's is untouched
    cuda = next(d for d in t.snapshot().to_json()["devices"] if d["device"] == "cuda:0")
    assert cuda["memory"] == {
        "total_bytes": 16 * GIB, "keys_bytes": 0, "keys": 0, "in_use_bytes": 0,
    }  # fmt: skip


def test_a_device_memory_event_before_its_budget_is_illegal() -> None:
    _, send = tracker()
    with pytest.raises(IllegalTransition, match="cuda:0: expected its budget_set first"):
        send(ev.ReservationMade, name="j/0", nbytes=500, device="cuda:0")
