"""The data side of the server-sent event stream: a bounded ring of the tracker's events, and subscribers.

Every event the tracker receives (applied or dropped) is published here under its id, the tracker's ``seq``
after it, so ids increase by one and a snapshot taken at ``seq`` S is continued exactly by the events after S.

One writer, no lock: :meth:`EventFeed.publish` runs only inside ``StatusTracker.apply`` on the event loop, and
subscribers read on the same loop. Publishing never waits: each subscriber has a bounded queue, and one that
overflows is told to resync (its queue is emptied, it gets a ``resync`` item) instead of slowing the engine.
Each event is turned into JSON once, when the first subscriber reads it, and shared by all of them.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Mapping
from typing import Any, NamedTuple

from ..events import EventBase, event_name, event_to_dict

__all__ = ["RESYNC", "EventFeed", "FeedItem", "Subscription"]

RESYNC = "resync"
"""Name of the item telling a subscriber it missed events: fetch ``/status`` and resume from its ``seq``."""


class FeedItem(NamedTuple):
    """One server-sent event: its ``id``, its ``event`` name and its JSON ``data``."""

    id: int
    event: str
    data: str


class _Record:
    """One published event. Its JSON is written the first time a subscriber reads it, once for all of them:
    publishing stays cheap when nobody listens, and twenty listeners cost one encoding."""

    __slots__ = ("_item", "context", "event", "id", "outcome")

    def __init__(self, event_id: int, event: EventBase, outcome: str, context: Mapping[str, Any]) -> None:
        self.id, self.event, self.outcome, self.context = event_id, event, outcome, context
        self._item: FeedItem | None = None

    def item(self) -> FeedItem:
        if self._item is None:
            payload = event_to_dict(self.event)
            payload["outcome"] = self.outcome
            payload.update(self.context)
            data = json.dumps(payload, separators=(",", ":"))
            self._item = FeedItem(self.id, event_name(self.event), data)
        return self._item


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
        self._subscribers: set[Subscription] = set()
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
            subscriber._offer(record)

    def backlog(self, after_id: int) -> list[FeedItem] | None:
        """The items after ``after_id`` still in the ring, or None when some of them are gone."""
        records = self._records_after(after_id)
        return None if records is None else [r.item() for r in records]

    def _records_after(self, after_id: int) -> list[_Record] | None:
        if after_id > self._last_id:
            return None  # an id from another boot, or from the future: cannot resume from it
        oldest = self._ring[0].id if self._ring else self._last_id + 1
        if after_id + 1 < oldest:
            return None
        return [r for r in self._ring if r.id > after_id]

    def subscribe(self, last_event_id: int | None = None) -> Subscription:
        """Events as they are published, from just after ``last_event_id`` when given (see
        :class:`Subscription`). The subscriber is attached at once."""
        return Subscription(self, last_event_id)

    def _resync(self, event_id: int, reason: str) -> FeedItem:
        self.resyncs += 1
        data = json.dumps({"reason": reason, "seq": event_id}, separators=(",", ":"))
        return FeedItem(event_id, RESYNC, data)


class Subscription:
    """One subscriber: an async iterator of :class:`FeedItem`, whose :meth:`take` also hands out every item
    ready without waiting (so a stream writes a burst of events at once).

    Resuming from an id still in the ring replays what follows it with no gap and no repeat. When the id is
    too old (or unknown), or the subscriber falls ``subscriber_queue`` events behind, a ``resync`` item comes
    instead, whose id is the newest event it lost: fetch ``/status`` and carry on. A feed never ends: close
    the subscription (:meth:`aclose`) to detach it.
    """

    def __init__(self, feed: EventFeed, last_event_id: int | None) -> None:
        self._feed = feed
        self._capacity = feed._subscriber_queue
        # Copying the backlog and attaching happen in one step on the loop: nothing falls between them.
        backlog = [] if last_event_id is None else feed._records_after(last_event_id)
        # When it cannot resume: a "behind" resync first, at the newest id before it attached.
        self._behind_at = feed.last_id if backlog is None else None
        self._queue: deque[_Record] = deque(backlog or ())  # the backlog, then what is published after
        # Overflow counts only what was published after attaching (the backlog never counts against it).
        self._unread_live = 0
        self._overflowed_at: int | None = None
        self._wakeup = asyncio.Event()
        self._closed = False
        feed._subscribers.add(self)

    def _offer(self, record: _Record) -> None:
        if self._unread_live >= self._capacity:
            # Too slow: drop all it has not read and tell it to resync instead of ever blocking (the
            # snapshot it then fetches covers what was dropped).
            self._queue.clear()
            self._unread_live = 0
            self._overflowed_at = record.id
        else:
            self._queue.append(record)
            self._unread_live += 1
        self._wakeup.set()

    def take(self, limit: int) -> list[FeedItem]:
        """Up to ``limit`` items that are ready now, in order (empty when none is; never waits)."""
        items: list[FeedItem] = []
        queue = self._queue
        while len(items) < limit:
            if self._behind_at is not None:
                behind, self._behind_at = self._behind_at, None
                items.append(self._feed._resync(behind, "behind"))
            elif self._overflowed_at is not None:  # the queue held nothing older when it overflowed
                lost, self._overflowed_at = self._overflowed_at, None
                items.append(self._feed._resync(lost, "overflow"))
            elif queue:
                if len(queue) <= self._unread_live:
                    self._unread_live -= 1
                items.append(queue.popleft().item())
            else:
                break
        return items

    @property
    def ready(self) -> bool:
        """True when :meth:`take` would hand out at least one item."""
        return self._behind_at is not None or self._overflowed_at is not None or bool(self._queue)

    @property
    def closed(self) -> bool:
        """True once detached (:meth:`close`): nothing more will come."""
        return self._closed

    async def wait(self) -> None:
        """Return once an item is ready (at once if one is)."""
        while not self.ready and not self._closed:
            self._wakeup.clear()
            await self._wakeup.wait()

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> FeedItem:
        while True:
            items = self.take(1)
            if items:
                return items[0]
            if self._closed:
                raise StopAsyncIteration
            await self.wait()

    async def aclose(self) -> None:
        """Detach from the feed (what is still queued is dropped); iteration then ends."""
        self.close()

    def close(self) -> None:
        """Detach from the feed, from synchronous code."""
        self._closed = True
        self._feed._subscribers.discard(self)
        self._queue.clear()
        self._wakeup.set()
