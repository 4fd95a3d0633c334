"""The one test clock: monotonic seconds that move only when a test moves them."""

from __future__ import annotations


class ManualClock:
    """A monotonic clock that moves only when told (``advance``, or set ``now``): every figure computed
    from event times (uptime, busy fractions, ages, retention) is then the same at every read until the test
    moves the clock."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, secs: float) -> None:
        self.now += secs
