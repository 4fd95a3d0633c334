"""How fast an upload's body arrives, and whether that is too slow: the one rule for it, on one clock.

An upload's body is judged in windows of ``window`` seconds (the server's ``request_timeout_secs``) counted
from the moment it began to stream. Its first window is its grace: nothing is judged before it ends. After it:

- it is **too slow** (:meth:`UploadRate.too_slow`, answered 408 and closed) when a whole window brought fewer
  than ``minimum x window`` bytes;
- it is **slow** (:meth:`UploadRate.slow`, the first connection closed to make room at a cap) when the last
  whole window and the current one so far average fewer than ``minimum`` bytes a second.

A window in which the server held the body back (it stopped reading because the application had not taken
what it had: its buffer was full) is the server's doing, not the client's: it is never judged. Time is the
caller's clock (``now``), so that a test moves it by hand.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["UploadRate"]


@dataclass
class UploadRate:
    """One upload's bytes by window. Invariants: ``_window_start <= now < _window_start + window`` once
    :meth:`_roll` has run for ``now``; ``_last_bytes`` is None until the first window (the grace) ended."""

    window: float
    """Seconds of a window (and of the grace)."""
    minimum: float
    """Bytes a second an upload must keep up after its grace (0: no minimum)."""
    started_at: float
    """When its body began to stream (the caller's clock)."""
    _window_start: float = field(init=False)
    _window_bytes: int = 0
    _excused: bool = False  # the server held the body back in the current window
    _last_bytes: int | None = None  # bytes of the last whole window; None during the grace
    _last_excused: bool = False

    def __post_init__(self) -> None:
        self._window_start = self.started_at

    def received(self, count: int, now: float, held: bool) -> None:
        """``count`` bytes arrived at ``now``; ``held``: the server stopped reading (its buffer is full)."""
        self._roll(now, held)
        self._window_bytes += count
        self._excused = self._excused or held

    def too_slow(self, now: float, held: bool) -> str | None:
        """Why this upload is cut off (its last whole window brought too few bytes), or None."""
        self._roll(now, held)
        if self.minimum <= 0 or self._last_bytes is None or self._last_excused:
            return None
        if self._last_bytes >= self.minimum * self.window:
            return None
        return (
            f"upload slower than {self.minimum:,.0f} bytes/s (min_upload_bytes_per_sec): "
            f"{self._last_bytes:,} bytes in the last {self.window:g} s"
        )

    def slow(self, now: float, held: bool) -> bool:
        """Whether it is past its grace and averages under ``minimum`` over the last whole window and the
        current one so far (never while the server holds its body back)."""
        self._roll(now, held)
        if self.minimum <= 0 or self._last_bytes is None or self._last_excused or self._excused or held:
            return False
        span = self.window + (now - self._window_start)
        return self._last_bytes + self._window_bytes < self.minimum * span

    def until_judged(self, now: float) -> float:
        """Seconds until the current window ends (when :meth:`too_slow` may next say something new)."""
        self._roll(now, False)
        return max(0.0, self._window_start + self.window - now)

    def _roll(self, now: float, held: bool) -> None:
        passed = int((now - self._window_start) // self.window)
        if passed <= 0:
            return
        if passed == 1:
            self._last_bytes, self._last_excused = self._window_bytes, self._excused
        else:  # whole windows went by with nothing received (any arrival would have rolled them)
            self._last_bytes, self._last_excused = 0, self._excused or held
        self._window_start += passed * self.window
        self._window_bytes = 0
        self._excused = held
