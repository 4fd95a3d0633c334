"""Server-sent events: the tracker's feed as ``text/event-stream``, resumed by ``Last-Event-ID``.

Every event ready goes out in one write (a burst costs one send, not one per event); a comment line is
the heartbeat while nothing happens (every ``HEARTBEAT_SECS``); a shutdown closes every stream.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
from typing import Any, Protocol

from fastapi import HTTPException

from ..status import Subscription

__all__ = ["BATCH_EVENTS", "HEARTBEAT_SECS", "Subscribes", "event_stream", "parse_event_id", "sse_frame"]

HEARTBEAT_SECS = 15.0
"""Seconds between heartbeat comments on an idle stream (the daemon's and the fleet's)."""
BATCH_EVENTS = 256
"""The most events one write of an event stream carries."""


class Subscribes(Protocol):
    """What a stream needs of the engine: its event feed, resumed after an event id."""

    def subscribe(self, last_event_id: int | None = None) -> Subscription: ...


def parse_event_id(raw: str | None) -> int | None:
    if raw is None or raw.strip() == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise HTTPException(400, f"Last-Event-ID {raw!r} is not an event id (a whole number)") from None
    if value < 0:
        raise HTTPException(400, f"Last-Event-ID {value} is negative")
    return value


async def event_stream(
    engine: Subscribes, resume: int | None, heartbeat: float, closing: asyncio.Event
) -> AsyncGenerator[str, None]:
    """Format the tracker's feed as SSE, with a comment line as heartbeat while nothing happens."""
    feed = engine.subscribe(resume)
    yield ": prooflane event stream\nretry: 1000\n\n"
    frames = _subscription_frames(feed, heartbeat, closing)
    try:
        async for chunk in frames:
            yield chunk
    finally:
        await frames.aclose()


async def _subscription_frames(
    feed: Subscription, heartbeat: float, closing: asyncio.Event
) -> AsyncGenerator[str, None]:
    """The tracker's own feed: every event ready goes out in one write (a burst costs one send, not one per
    event), and waiting costs no task per event."""
    closed = asyncio.ensure_future(closing.wait())
    closed.add_done_callback(lambda _: feed.close())  # wakes the wait below
    try:
        while not closing.is_set() and not feed.closed:
            if feed.ready:
                yield "".join(sse_frame(i.id, i.event, i.data) for i in feed.take(BATCH_EVENTS))
                continue
            try:
                async with asyncio.timeout(heartbeat):
                    await feed.wait()
            except TimeoutError:
                yield ": heartbeat\n\n"
    finally:
        closed.cancel()
        feed.close()


def sse_frame(event_id: int | None, name: str, data: Any) -> str:
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    lines = [f"id: {event_id}"] if event_id is not None else []
    lines.append(f"event: {name}")
    lines.extend(f"data: {line}" for line in text.splitlines() or [""])
    return "\n".join(lines) + "\n\n"
