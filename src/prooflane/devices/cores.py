"""The core budget: how many CPU-heavy steps run at once across all workers and the synthesis pool."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

__all__ = ["CoreBudget"]


class CoreBudget:
    """At most ``cores`` CPU-heavy steps at once (0: no limit). Event-loop side only, so no lock: the
    counters change only between awaits. Invariant: ``0 <= running <= cores`` whenever ``cores > 0``.

    Device sections, finalizations and syntheses each hold one slot while they compute. A device section
    takes its slot under the device lock and before its lease is granted, so a partition shown "proving" is
    computing, never waiting for a core.
    """

    def __init__(self, cores: int) -> None:
        self.cores = cores
        self.running = 0  # steps holding a slot now
        self.peak = 0  # the most that ever held one at once
        self.steps = 0  # steps that held one, in all
        self._slots = asyncio.Semaphore(cores) if cores > 0 else None

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold one slot (waiting, first come first served, for one to be free) while the step computes."""
        async with self._slots if self._slots is not None else contextlib.nullcontext():
            self.running += 1
            self.steps += 1
            self.peak = max(self.peak, self.running)
            try:
                yield
            finally:
                self.running -= 1
