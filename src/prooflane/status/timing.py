"""Time accounting for the status tracker: device busy intervals, per-minute history, phase histograms.

All times are seconds on the tracker's injected clock. Like the tracker, these are touched only on the event
loop (no locks).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

__all__ = [
    "PHASE_BUCKETS",
    "THROUGHPUT_WINDOWS",
    "CompletionRate",
    "DeviceBusy",
    "HistogramView",
    "MinuteHistory",
    "PhaseHistogram",
]

MINUTE = 60.0
HOUR = 3600.0

THROUGHPUT_WINDOWS: tuple[float, float] = (60.0, 600.0)
"""The windows (seconds) the snapshot's throughput is measured over: the last minute and the last ten."""

PHASE_BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
"""Upper bounds (seconds) of the partition phase histogram buckets; +Inf is implied."""


class DeviceBusy:
    """When one device was busy: while at least one of its workers holds a current lease.

    Overlapping leases of the device's workers count once (the union), so the fraction never passes 1. The
    closed busy intervals of the last minute are kept with their total, so a read costs the intervals that
    left the window since the last one, not every interval of the minute (1,300 of them a device at the
    tiny profile: most of a ``/status`` at full load once).

    Invariant: ``_closed_secs`` is the sum of the lengths of the intervals in ``_closed``, which end in
    order; an interval's part before ``_cut`` (the start of the last window read) is no longer counted.
    """

    def __init__(self, name: str, kind: str, since: float) -> None:
        self.name = name
        self.kind = kind
        self.since = since
        self.active = 0
        self.busy_since: float | None = None
        self._closed: deque[tuple[float, float]] = deque()
        self._closed_secs = 0.0
        self._cut = since  # intervals (or their parts) before this are no longer in _closed_secs

    def start(self, at: float) -> None:
        """One more of its workers holds a current lease."""
        if self.active == 0:
            self.busy_since = at
        self.active += 1

    def stop(self, at: float) -> tuple[float, float] | None:
        """One fewer; returns the busy interval that closed, if the device became idle."""
        self.active -= 1
        if self.active > 0 or self.busy_since is None:
            return None
        interval = (self.busy_since, max(at, self.busy_since))
        self.busy_since = None
        self._closed.append(interval)
        self._closed_secs += interval[1] - max(interval[0], self._cut)
        self._forget(at - MINUTE)
        return interval

    def fraction(self, now: float) -> float:
        """Busy share of the last minute (of its lifetime, when younger than that). ``now`` never goes back
        between reads (the tracker's clock)."""
        start = max(now - MINUTE, self.since)
        span = now - start
        if span <= 0:
            return 1.0 if self.busy_since is not None else 0.0
        self._forget(start)
        busy = self._closed_secs
        if self.busy_since is not None:
            busy += _overlap(self.busy_since, now, start, now)
        return min(1.0, busy / span)

    def _forget(self, start: float) -> None:
        """Count nothing before ``start`` (which only moves on)."""
        if start <= self._cut:
            return
        closed = self._closed
        while closed and closed[0][1] <= start:
            s, e = closed.popleft()
            self._closed_secs -= e - max(s, self._cut)
        if closed:  # the first one left may begin before the window: its part before it goes
            s, e = closed[0]
            self._closed_secs -= max(0.0, min(start, e) - max(s, self._cut))
        self._cut = start
        if not closed:
            self._closed_secs = 0.0  # no rounding left behind


class MinuteHistory:
    """Counts and busy seconds per minute of the clock, for the last ``minutes`` minutes."""

    def __init__(self, minutes: int) -> None:
        self.minutes = minutes
        self._proofs: dict[int, int] = {}
        self._partitions: dict[int, int] = {}
        self._busy: dict[int, float] = {}

    def count_proof(self, at: float) -> None:
        """A job completed."""
        key = _minute(at)
        self._proofs[key] = self._proofs.get(key, 0) + 1
        self._trim(key)

    def count_partition(self, at: float) -> None:
        """A partition completed."""
        key = _minute(at)
        self._partitions[key] = self._partitions.get(key, 0) + 1

    def add_busy(self, start: float, end: float) -> None:
        """A device was busy from ``start`` to ``end``: spread the seconds over the minutes they cover."""
        _spread(self._busy, start, end)
        self._trim(_minute(end))

    def series(
        self, now: float, devices: int, open_intervals: list[tuple[float, float]]
    ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[float, ...]]:
        """(proofs, partitions, busy fraction) per minute, oldest first, ending with the current minute."""
        last = _minute(now)
        keys = range(last - self.minutes + 1, last + 1)
        busy = dict(self._busy)
        for start, end in open_intervals:
            _spread(busy, start, end)
        fractions = []
        for key in keys:
            span = min(MINUTE, now - key * MINUTE) if key == last else MINUTE
            capacity = span * devices
            fractions.append(min(1.0, busy.get(key, 0.0) / capacity) if capacity > 0 else 0.0)
        return (
            tuple(self._proofs.get(k, 0) for k in keys),
            tuple(self._partitions.get(k, 0) for k in keys),
            tuple(fractions),
        )

    def _trim(self, current: int) -> None:
        oldest = current - self.minutes
        for table in (self._proofs, self._partitions, self._busy):
            if len(table) > self.minutes + 1:
                for key in [k for k in table if k < oldest]:
                    del table[key]


class CompletionRate:
    """How many things (jobs, partitions) completed in each second of the clock over the last ``span``
    seconds, for rates over sliding windows: at most ``span`` + 1 counts kept, whatever the rate."""

    def __init__(self, span: float = THROUGHPUT_WINDOWS[-1]) -> None:
        self.span = span
        self._seconds: deque[list[int]] = deque()  # [second, count], oldest first

    def count(self, at: float) -> None:
        """One completed at ``at`` (an event stamped earlier than the last one counts in the last second)."""
        second = math.floor(at)
        if self._seconds and self._seconds[-1][0] >= second:
            self._seconds[-1][1] += 1
        else:
            self._seconds.append([second, 1])
        while self._seconds[0][0] < second - self.span:
            self._seconds.popleft()

    def per_hour(self, now: float, window: float, since: float) -> float:
        """Completions per hour over the last ``window`` seconds (to the second), or since ``since`` (the
        tracker's start) when that is more recent; 0 over an empty span."""
        span = min(window, now - since)
        if span <= 0:
            return 0.0
        first, done = math.floor(now - window), 0
        for second, n in reversed(self._seconds):
            if second < first:
                break
            done += n
        return done * HOUR / span


@dataclass(frozen=True, slots=True)
class HistogramView:
    """A histogram as Prometheus wants it: cumulative counts per upper bound, then sum and count."""

    bounds: tuple[float, ...]
    cumulative: tuple[int, ...]
    sum: float
    count: int


class PhaseHistogram:
    """Durations of one partition phase, in seconds, in :data:`PHASE_BUCKETS`."""

    def __init__(self, bounds: tuple[float, ...] = PHASE_BUCKETS) -> None:
        self.bounds = bounds
        self._counts = [0] * (len(bounds) + 1)
        self._sum = 0.0

    def observe(self, seconds: float) -> None:
        """Count one duration."""
        index = next((i for i, b in enumerate(self.bounds) if seconds <= b), len(self.bounds))
        self._counts[index] += 1
        self._sum += seconds

    def view(self) -> HistogramView:
        """A frozen copy with cumulative counts (the last one is the +Inf bucket, equal to the count)."""
        cumulative, running = [], 0
        for c in self._counts:
            running += c
            cumulative.append(running)
        return HistogramView(self.bounds, tuple(cumulative), self._sum, running)


def _minute(at: float) -> int:
    return math.floor(at / MINUTE)


def _overlap(s: float, e: float, lo: float, hi: float) -> float:
    return max(0.0, min(e, hi) - max(s, lo))


def _spread(table: dict[int, float], start: float, end: float) -> None:
    for key in range(_minute(start), _minute(end) + 1):
        seconds = _overlap(start, end, key * MINUTE, (key + 1) * MINUTE)
        if seconds > 0:
            table[key] = table.get(key, 0.0) + seconds
