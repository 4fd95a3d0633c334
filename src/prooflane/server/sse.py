"""Server-sent events: the tracker's feed as ``text/event-stream``, resumed by ``Last-Event-ID``.

Every event ready goes out in one write (a burst costs one send, not one per event); a comment line is
the heartbeat while nothing happens (every ``HEARTBEAT_SECS``); a shutdown closes every stream.

An event's id carries its boot: ``<boot_id>:<seq>``. A ``Last-Event-ID`` of another boot (the daemon
restarted since) cannot be resumed from, whatever its number: the stream starts with a ``resync`` (fetch
``/status``, carry on from its ``seq``) instead of continuing silently at that number in the new boot. A bare
``<seq>`` is taken as this boot's (a client that read it from this boot's ``/status``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
from typing import Any, Protocol

from fastapi import HTTPException

from ..status import Subscription

__all__ = [
    "BATCH_EVENTS",
    "HEARTBEAT_SECS",
    "Subscribes",
    "event_id",
    "event_stream",
    "parse_event_id",
    "sse_frame",
]

HEARTBEAT_SECS = 15.0
"""Seconds between heartbeat comments on an idle stream (the daemon's and the fleet's)."""
BATCH_EVENTS = 256
"""The most events one write of an event stream carries."""


class Subscribes(Protocol):
    """What a stream needs of the engine: its boot and its event feed, resumed after an event id."""

    @property
    def boot_id(self) -> str: ...

    @property
    def seq(self) -> int: ...

    def subscribe(self, last_event_id: int | None = None) -> Subscription: ...


def event_id(boot_id: str, seq: int) -> str:
    """The id an event goes out with: its boot and its number."""
    return f"{boot_id}:{seq}"


def parse_event_id(raw: str | None, boot_id: str) -> tuple[int | None, bool]:
    """The number to resume after, and whether the id is of another boot (then: resync, no number)."""
    if raw is None or raw.strip() == "":
        return None, False
    boot, colon, number = raw.strip().rpartition(":")
    if not number.isdigit() or (colon and not boot):
        raise HTTPException(
            400, f"Last-Event-ID {raw!r} is not an event id (the stream's ids are <boot_id>:<seq>)"
        )
    if colon and boot != boot_id:
        return None, True
    return int(number), False


async def event_stream(
    engine: Subscribes, last_event_id: str | None, heartbeat: float, closing: asyncio.Event
) -> AsyncGenerator[str, None]:
    """Format the tracker's feed as SSE, with a comment line as heartbeat while nothing happens. Raises
    400 (before anything is sent) for a Last-Event-ID that is not an event id."""
    boot = engine.boot_id
    resume, foreign = parse_event_id(last_event_id, boot)
    feed = engine.subscribe(resume)
    greeting = ": prooflane event stream\nretry: 1000\n\n"
    if foreign:  # subscribed now, at this seq: nothing can come between the two
        seq = engine.seq
        reason = f"the event id {last_event_id!r} is of another boot of the daemon (it restarted since)"
        greeting += sse_frame(event_id(boot, seq), "resync", {"reason": reason, "seq": seq, "boot_id": boot})
    yield greeting
    frames = _subscription_frames(feed, boot, heartbeat, closing)
    try:
        async for chunk in frames:
            yield chunk
    finally:
        await frames.aclose()


async def _subscription_frames(
    feed: Subscription, boot: str, heartbeat: float, closing: asyncio.Event
) -> AsyncGenerator[str, None]:
    """The tracker's own feed: every event ready goes out in one write (a burst costs one send, not one per
    event), and waiting costs no task per event."""
    closed = asyncio.ensure_future(closing.wait())
    closed.add_done_callback(lambda _: feed.close())  # wakes the wait below
    try:
        while not closing.is_set() and not feed.closed:
            if feed.ready:
                batch = feed.take(BATCH_EVENTS)
                yield "".join(sse_frame(event_id(boot, i.id), i.event, i.data) for i in batch)
                continue
            try:
                async with asyncio.timeout(heartbeat):
                    await feed.wait()
            except TimeoutError:
                yield ": heartbeat\n\n"
    finally:
        closed.cancel()
        feed.close()


def sse_frame(frame_id: str | None, name: str, data: Any) -> str:
    """One event as SSE text (``data`` JSON-encoded unless already text)."""
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    lines = [f"id: {frame_id}"] if frame_id is not None else []
    lines.append(f"event: {name}")
    lines.extend(f"data: {line}" for line in text.splitlines() or [""])
    return "\n".join(lines) + "\n\n"
