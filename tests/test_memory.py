"""The memory budget: atomic admission, partial release, evictable cached allocations."""

from __future__ import annotations

import asyncio
import random

import pytest

from prooflane.events import Event
from prooflane.memory import MemoryBudget

pytestmark = pytest.mark.anyio


def test_reservation_shrinks_then_releases_to_zero() -> None:
    events: list[Event] = []
    budget = MemoryBudget(100, emit=events.append)
    reservation = budget.try_reserve("j/0", 60)
    assert reservation is not None and budget.reserved == 60
    reservation.shrink(45)
    assert budget.reserved == 15
    reservation.release()
    reservation.release()
    assert budget.reserved == 0 and budget.stats().live_reservations == 0
    assert [type(e).__name__ for e in events] == [
        "BudgetSet",
        "ReservationMade",
        "ReservationShrunk",
        "ReservationReleased",
    ]
    budget.check()


def test_reservation_that_does_not_fit_is_refused_without_side_effects() -> None:
    budget = MemoryBudget(100)
    assert budget.try_reserve("a", 70) is not None
    assert budget.try_reserve("b", 31) is None
    assert budget.reserved == 70
    assert not budget.could_ever_fit(101) and budget.could_ever_fit(100)


def test_headroom_stays_free_for_proving_keys() -> None:
    budget = MemoryBudget(100)
    assert budget.try_reserve("a", 50, headroom=40) is not None
    assert budget.try_reserve("b", 20, headroom=40) is None
    assert budget.try_reserve("b", 10, headroom=40) is not None


def test_idle_cached_allocation_is_evicted_least_recently_used_first() -> None:
    budget = MemoryBudget(100)
    evicted: list[str] = []
    old = budget.try_cache("key:a", 40, lambda: evicted.append("a"))
    new = budget.try_cache("key:b", 40, lambda: evicted.append("b"))
    assert old is not None and new is not None
    new.use()
    new.done()  # used after `old`: `old` is the least recently used
    assert budget.try_reserve("p", 50) is not None
    assert evicted == ["a"] and not old.live and new.live
    assert budget.cached == 40 and budget.reserved == 50
    budget.check()


def test_busy_cached_allocation_is_never_evicted() -> None:
    budget = MemoryBudget(100)
    key = budget.try_cache("key:a", 80, lambda: None)
    assert key is not None
    key.use()
    assert budget.try_reserve("p", 30) is None
    key.done()
    assert budget.try_reserve("p", 30) is not None
    assert not key.live


async def test_concurrent_reservations_never_exceed_the_budget_and_drain_to_zero() -> None:
    budget = MemoryBudget(1000)
    seen: list[int] = []
    rng = random.Random(4)

    async def one(i: int) -> None:
        reservation = await budget.reserve(f"p{i}", rng.randint(50, 400))
        seen.append(budget.reserved)
        await asyncio.sleep(0)
        reservation.shrink(reservation.nbytes // 2)
        await asyncio.sleep(0)
        reservation.release()

    async with asyncio.timeout(10):
        await asyncio.gather(*(one(i) for i in range(200)))
    assert max(seen) <= 1000 and len(seen) == 200
    assert budget.reserved == 0 and budget.stats().peak_used_bytes <= 1000
    budget.check()


async def test_a_waiting_cache_gets_its_bytes_once_a_reservation_is_released() -> None:
    budget = MemoryBudget(100)
    reservation = budget.try_reserve("p", 90)
    assert reservation is not None
    waiter = asyncio.create_task(budget.cache("key:a", 50, lambda: None))
    await asyncio.sleep(0)
    assert not waiter.done()
    reservation.release()
    async with asyncio.timeout(5):
        allocation = await waiter
    assert allocation.live and budget.cached == 50
