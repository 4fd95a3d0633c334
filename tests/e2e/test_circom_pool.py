"""The synthesis pool grows when calls overlap (as the dispatcher lets syntheses overlap while the devices
wait on synthesis) and shrinks back: real processes of the process backend."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from prooflane.devices import pool
from prooflane.devices.process import ProcessBackend

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


def pid_after(secs: float) -> int:
    """In a pool process: its pid, after ``secs`` (long enough for the calls of the test to overlap)."""
    time.sleep(secs)
    return os.getpid()


async def test_overlapping_calls_get_an_extra_process_that_ends_when_idle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pool, "EXTRA_IDLE_SECS", 0.2)
    backend = ProcessBackend(pool_size=1, workers=0)
    await backend.start()
    try:
        alone = await backend.run(pid_after, 0.0)
        assert backend.pool_pids() == [alone]
        first, second = await asyncio.gather(backend.run(pid_after, 1.0), backend.run(pid_after, 1.0))
        assert alone in (first, second) and first != second  # the second ran on an extra process
        assert len(backend.pool_pids()) == 2
        await asyncio.sleep(1.0)  # the extra process is retired EXTRA_IDLE_SECS after its last call
        assert backend.pool_pids() == [alone]
        assert await backend.run(pid_after, 0.0) == alone
    finally:
        await backend.stop()
