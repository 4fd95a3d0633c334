"""The event definitions: frozen, named, round-trip through JSON, lease tokens increase."""

from __future__ import annotations

import dataclasses
import json
import typing
from pathlib import Path

import pytest

from prooflane import events as ev


def test_every_event_class_is_frozen_and_carries_at() -> None:
    for cls in ev.EVENT_TYPES.values():
        names = [f.name for f in dataclasses.fields(cls)]
        assert names[0] == "at", cls.__name__
        assert cls.__dataclass_params__.frozen, cls.__name__  # type: ignore[attr-defined]


def test_events_cannot_be_changed() -> None:
    event = ev.JobSubmitted(at=1.0, job_id="j", kind="porep-c2", priority="normal", partitions=10)
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.job_id = "other"  # type: ignore[misc]


def test_event_names_are_snake_case_of_the_class() -> None:
    event = ev.DeviceSectionFinished(at=0.0, token=ev.LeaseToken(3), prove_ms=1.5)
    assert ev.event_name(event) == "device_section_finished"
    assert ev.EVENT_TYPES["lease_granted"] is ev.LeaseGranted


def test_event_round_trips_through_json() -> None:
    event = ev.LeaseGranted(
        at=2.5,
        token=ev.LeaseToken(7),
        worker_id="cpu0-w1",
        device="cpu0",
        job_id="ps-snap-update-3644168-33825",
        partition=15,
        attempt=2,
    )
    data = json.loads(json.dumps(ev.event_to_dict(event)))
    assert data["type"] == "lease_granted" == ev.event_name(event)
    assert data["job_id"] == "ps-snap-update-3644168-33825"
    assert type(event)(**{k: v for k, v in data.items() if k != "type"}) == event


def test_a_resumed_job_carries_its_done_partitions_into_its_json() -> None:
    event = ev.JobSubmitted(
        at=0.0, job_id="j", kind="porep-c2", priority="normal", partitions=10, done_partitions=(0, 3)
    )
    assert json.loads(json.dumps(ev.event_to_dict(event)))["done_partitions"] == [0, 3]


def test_a_circom_job_names_its_circuit_and_others_default_to_none() -> None:
    event = ev.JobSubmitted(at=0.0, job_id="j", kind="circom", priority="high", partitions=2, circuit="mul2")
    assert ev.event_to_dict(event)["circuit"] == "mul2"
    assert (
        ev.JobSubmitted(at=0.0, job_id="k", kind="porep-c2", priority="normal", partitions=1).circuit is None
    )


def test_every_event_type_has_one_name_derived_from_the_event_union() -> None:
    union = typing.get_args(ev.Event)
    assert set(ev.EVENT_TYPES.values()) == set(union)
    assert len(ev.EVENT_TYPES) == len(union)  # one name each
    package = Path(ev.__file__).parent
    for cls in union:  # each event class is defined once, in events.py
        homes = [p.name for p in package.rglob("*.py") if f"class {cls.__name__}(EventBase)" in p.read_text()]
        assert homes == ["events.py"], cls.__name__


def test_lease_tokens_increase_and_never_repeat() -> None:
    minter = ev.LeaseMinter()
    tokens = [minter.mint() for _ in range(100)]
    assert tokens == sorted(set(tokens))
    assert tokens[0] >= 1


def _descendants(cls: type) -> set[type]:
    found: set[type] = set()
    subclasses: list[type] = cls.__subclasses__()
    for sub in subclasses:
        found |= {sub, *_descendants(sub)}
    return found


def test_every_event_class_is_in_the_union_and_named() -> None:
    """A class derived from EventBase but left out of the union would have no name and no encoding."""
    # A slots dataclass is a second class made from the first, which stays among the subclasses: each name
    # counts once, as the class events.py binds to it.
    names = {cls.__name__ for cls in _descendants(ev.EventBase) if cls.__module__ == ev.__name__}
    defined = {getattr(ev, name) for name in names}
    assert len(defined) > 20, "the event classes are not found"
    assert defined == set(typing.get_args(ev.Event))
    assert defined == set(ev.EVENT_TYPES.values())
