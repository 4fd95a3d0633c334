"""The timer behind the live view's expiry: while an event loop runs, the tracker arms one for the oldest
ended job's end of retention, so that the job leaves the view (and subscribers learn of it) without a poll.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["ExpiryTimer"]


class ExpiryTimer:
    """At most one timer at a time, on the running event loop, calling ``fire`` once ``due`` (seconds of
    ``clock``) is reached. Without a running loop (a synchronous caller), none: the next event or read
    expires the job. A timer left on another loop, which has finished, never fires: a new one is armed."""

    def __init__(self, clock: Callable[[], float], fire: Callable[[], object]) -> None:
        self._clock = clock
        self._fire = fire
        self._armed: tuple[asyncio.AbstractEventLoop, asyncio.TimerHandle] | None = None

    def arm(self, due: float) -> None:
        """Fire at ``due`` unless a timer is armed on this loop already."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if self._armed is not None and self._armed[0] is loop:
            return
        self._armed = (loop, loop.call_later(max(0.0, due - self._clock()), self._due))

    def _due(self) -> None:
        self._armed = None
        self._fire()
