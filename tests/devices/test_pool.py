"""The synthesis pool's lanes, with real processes: a call past its limit, or whose caller is cancelled,
ends the one process that runs it (and only that one); a long call leaves the other lanes to other calls;
a failure that cannot be pickled comes back as one line."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from prooflane.devices.backend import PoolTimedOut
from prooflane.devices.cores import CoreBudget
from prooflane.devices.pool import SynthesisPool
from prooflane.devices.process import mp_context

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


def _spin(seconds: float) -> int:
    """Busy for ``seconds`` (as a witness generator in a loop is), then its pid."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
    return os.getpid()


def _pid() -> int:
    return os.getpid()


class _Unpicklable(Exception):
    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError("ctypes objects containing pointers cannot be pickled")


def _fails_unpicklably() -> None:
    raise _Unpicklable("wasm trap: interrupt\nwasm backtrace:\n  0: 0x43")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


async def _ended(pid: int) -> bool:
    for _ in range(200):  # it is signalled at once; its end is seen within moments
        if not _alive(pid):
            return True
        await asyncio.sleep(0.05)
    return False


@pytest.fixture
async def pool() -> AsyncIterator[SynthesisPool]:
    starter = ThreadPoolExecutor(max_workers=1)
    pool = SynthesisPool(mp_context(), 1, 0, CoreBudget(0), starter, most=2)
    pool.start()
    try:
        yield pool
    finally:
        pool.stop()
        starter.shutdown(wait=False)


async def test_a_call_past_its_limit_ends_its_process_and_the_next_call_runs(pool: SynthesisPool) -> None:
    first = await pool.run(_pid)
    with pytest.raises(PoolTimedOut, match=r"ran past its time limit of 0\.5 s, and its process was ended"):
        await pool.run(_spin, 3600.0, limit=0.5)
    assert await _ended(first)
    assert await pool.run(_pid) not in (first, 0)  # a new process in its lane


async def test_a_cancelled_call_ends_its_process_at_once(pool: SynthesisPool) -> None:
    first = await pool.run(_pid)
    call = asyncio.ensure_future(pool.run(_spin, 3600.0))
    for _ in range(600):  # until the call runs in the lane's process
        if first in pool.pids() and not call.done():
            await asyncio.sleep(0.2)
            break
        await asyncio.sleep(0.05)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert await _ended(first)
    assert await pool.run(_pid) != first


async def test_a_long_call_holds_one_lane_and_another_call_runs_beside_it(pool: SynthesisPool) -> None:
    long = asyncio.ensure_future(pool.run(_spin, 3600.0))
    await asyncio.sleep(0.5)
    beside = await asyncio.wait_for(pool.run(_pid), 60)  # in an extra lane, while the long call runs
    assert not long.done() and beside in pool.pids()
    long.cancel()
    with pytest.raises(asyncio.CancelledError):
        await long


async def test_a_failure_that_cannot_be_pickled_comes_back_as_one_line(pool: SynthesisPool) -> None:
    with pytest.raises(RuntimeError) as failed:
        await pool.run(_fails_unpicklably)
    assert str(failed.value) == "_Unpicklable: wasm trap: interrupt"
    assert await pool.run(_pid) > 0  # the lane lives on
