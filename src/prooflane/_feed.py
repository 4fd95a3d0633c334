"""The data side of the server-sent event stream: a bounded ring of the tracker's events, and subscribers.

Every event the tracker receives (applied or dropped) is published here under its id, the tracker's ``seq``
after it, so ids increase by one and a snapshot taken at ``seq`` S is continued exactly by the events after S.

One writer, no lock: :meth:`EventFeed.publish` runs only inside ``StatusTracker.apply`` on the event loop, and
subscribers read on the same loop. Publishing never waits: each subscriber has a bounded queue, and one that
overflows is told to resync (its queue is emptied, it gets a ``resync`` item) instead of slowing the engine.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .events import EventBase, event_name, event_to_dict

__all__ = ["RESYNC", "EventFeed", "FeedItem"]

RESYNC = "resync"
"""Name of the item telling a subscriber it missed events: fetch ``/status`` and resume from its ``seq``."""


class FeedItem(NamedTuple):
    """One server-sent event: its ``id``, its ``event`` name and its JSON ``data``."""

    id: int
    event: str
    data: str


@dataclass(frozen=True, slots=True)
class _Record:
    # Encoded only when a subscriber reads it: publishing stays cheap when nobody listens.
    id: int
    event: EventBase
    outcome: str
    context: Mapping[str, Any]

    def item(self) -> FeedItem:
        payload = event_to_dict(self.event)
        payload["outcome"] = self.outcome
        payload.update(self.context)
        return FeedItem(self.id, event_name(self.event), json.dumps(payload, separators=(",", ":")))


@dataclass(slots=True, eq=False)  # compared and hashed by identity
class _Subscriber:
    capacity: int
    queue: deque[_Record] = field(default_factory=deque)
    overflowed_at: int | None = None
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)

    def offer(self, record: _Record) -> None:
        if len(self.queue) >= self.capacity:
            # Too slow: drop what it has not read and tell it to resync instead of ever blocking.
            self.queue.clear()
            self.overflowed_at = record.id
        else:
            self.queue.append(record)
        self.wakeup.set()


class EventFeed:
    """A bounded ring of recent events with subscribers that resume by id.

    ``capacity``: how many events are kept for resuming; ``subscriber_queue``: how many unread events one
    subscriber may have before it is told to resync.
    """

    def __init__(self, capacity: int = 4096, subscriber_queue: int = 1024) -> None:
        if capacity < 1 or subscriber_queue < 1:
            raise ValueError("EventFeed capacity and subscriber_queue must be at least 1")
        self._ring: deque[_Record] = deque(maxlen=capacity)
        self._subscriber_queue = subscriber_queue
        self._subscribers: set[_Subscriber] = set()
        self._last_id = 0
        self.resyncs = 0
        """Resync items handed out since boot (too far behind, or overflowed)."""

    @property
    def last_id(self) -> int:
        """The id of the newest event published (0 before the first)."""
        return self._last_id

    @property
    def subscribers(self) -> int:
        """How many subscribers are attached now."""
        return len(self._subscribers)

    def publish(self, event_id: int, event: EventBase, outcome: str, context: Mapping[str, Any]) -> None:
        """Append one event; ids must increase. Never blocks, never raises for a slow subscriber."""
        if event_id <= self._last_id:
            raise ValueError(f"event id must increase: expected > {self._last_id}, got {event_id}")
        record = _Record(event_id, event, outcome, context)
        self._last_id = event_id
        self._ring.append(record)
        for subscriber in self._subscribers:
            subscriber.offer(record)

    def backlog(self, after_id: int) -> list[FeedItem] | None:
        """The items after ``after_id`` still in the ring, or None when some of them are gone."""
        if after_id > self._last_id:
            return None  # an id from another boot, or from the future: cannot resume from it
        oldest = self._ring[0].id if self._ring else self._last_id + 1
        if after_id + 1 < oldest:
            return None
        return [r.item() for r in self._ring if r.id > after_id]

    async def subscribe(self, last_event_id: int | None = None) -> AsyncIterator[FeedItem]:
        """Yield events as they are published, from just after ``last_event_id`` when given.

        Resuming from an id still in the ring replays what follows it with no gap and no repeat. When the
        id is too old (or unknown), or the subscriber falls ``subscriber_queue`` events behind, a ``resync``
        item comes instead, whose id is the newest event it lost: fetch ``/status`` and carry on.
        """
        subscriber = _Subscriber(self._subscriber_queue)
        # Copying the backlog and attaching happen in one step on the loop: nothing falls between them.
        backlog = [] if last_event_id is None else self.backlog(last_event_id)
        self._subscribers.add(subscriber)
        try:
            if backlog is None:
                yield self._resync(self._last_id, "behind")
            else:
                for item in backlog:
                    yield item
            while True:
                if subscriber.overflowed_at is not None:
                    lost, subscriber.overflowed_at = subscriber.overflowed_at, None
                    yield self._resync(lost, "overflow")
                elif subscriber.queue:
                    yield subscriber.queue.popleft().item()
                else:
                    subscriber.wakeup.clear()
                    await subscriber.wakeup.wait()
        finally:
            self._subscribers.discard(subscriber)

    def _resync(self, event_id: int, reason: str) -> FeedItem:
        self.resyncs += 1
        data = json.dumps({"reason": reason, "seq": event_id}, separators=(",", ":"))
        return FeedItem(event_id, RESYNC, data)
