"""The host-memory budget: reservations with partial release, and evictable cached allocations.

Two kinds of holders share one byte budget:

- a *reservation* is taken for one partition before its synthesis, shrinks when part of it is given back
  (the a/b/c vectors after ``prove_start``) and is released after ``prove_finish``;
- a *cached allocation* is a proving key a worker keeps loaded. It is idle while no partition uses it; an
  idle one is evicted (least recently used first) when a reservation or another allocation needs its bytes.

The same class budgets a device's memory (a ``cuda`` device: its capacity, the key bases resident in it as
cached allocations, each partition's device section as a reservation); such a budget names its device
(``device``) in every event it posts, so the tracker keeps it apart from the host's.

Invariant (checked by ``check()``): ``reserved + cached == sum of live holders`` and ``<= total``. Only the
event loop touches a budget, so admission is atomic without a lock: there is no ``await`` between the check
that bytes are free and taking them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from .events import (
    AllocationCached,
    AllocationEvicted,
    AllocationUsed,
    BudgetSet,
    Event,
    ReservationMade,
    ReservationReleased,
    ReservationShrunk,
)

__all__ = ["BudgetStats", "CachedAllocation", "MemoryBudget", "Reservation"]

Emit = Callable[[Event], None]


@dataclass(frozen=True)
class BudgetStats:
    """A copy of the budget's figures at one moment."""

    total_bytes: int
    reserved_bytes: int
    cached_bytes: int
    peak_used_bytes: int
    live_reservations: int
    live_allocations: int

    @property
    def available_bytes(self) -> int:
        """Bytes neither reserved nor cached."""
        return self.total_bytes - self.reserved_bytes - self.cached_bytes


class Reservation:
    """Bytes held for one piece of work; ``shrink`` gives part back, ``release`` the rest (idempotent)."""

    def __init__(self, budget: MemoryBudget, name: str, nbytes: int) -> None:
        self.budget = budget
        self.name = name
        self.nbytes = nbytes

    @property
    def live(self) -> bool:
        """True until released."""
        return self.budget._reservations.get(self.name) is self

    def shrink(self, nbytes: int) -> None:
        """Give back ``nbytes`` (at most what is left) and keep the rest."""
        if not self.live:
            return
        nbytes = min(nbytes, self.nbytes)
        self.nbytes -= nbytes
        self.budget._reserved -= nbytes
        self.budget._emit(
            ReservationShrunk(
                at=self.budget._clock(), name=self.name, nbytes=nbytes, device=self.budget.device
            )
        )
        self.budget._wake()

    def release(self) -> None:
        """Give back everything left; a second call does nothing."""
        if not self.live:
            return
        del self.budget._reservations[self.name]
        self.budget._reserved -= self.nbytes
        self.nbytes = 0
        self.budget._emit(
            ReservationReleased(at=self.budget._clock(), name=self.name, device=self.budget.device)
        )
        self.budget._wake()


class CachedAllocation:
    """A proving key a worker keeps loaded. ``busy`` counts partitions using it; idle ones may be evicted."""

    def __init__(self, budget: MemoryBudget, name: str, nbytes: int, on_evict: Callable[[], None]) -> None:
        self.budget = budget
        self.name = name
        self.nbytes = nbytes
        self.busy = 0
        self.last_used = time.monotonic()
        self._on_evict = on_evict

    @property
    def live(self) -> bool:
        """True until evicted or released."""
        return self.budget._allocations.get(self.name) is self

    def use(self) -> None:
        """Mark it in use by one more partition (not evictable until ``done``)."""
        self.busy += 1
        self.last_used = time.monotonic()
        self.budget._emit(AllocationUsed(at=self.budget._clock(), name=self.name, device=self.budget.device))

    def done(self) -> None:
        """One partition stopped using it."""
        self.busy = max(0, self.busy - 1)
        self.last_used = time.monotonic()
        self.budget._wake()

    def release(self) -> None:
        """Drop it from the budget without calling the eviction callback (its holder is gone)."""
        self.budget._drop(self, call_back=False)


class MemoryBudget:
    """A byte budget shared by reservations and cached allocations. Event-loop only (see module doc).

    ``device``: the device whose memory it budgets (None: the host's), named in every event it posts."""

    def __init__(
        self,
        total_bytes: int,
        *,
        emit: Emit | None = None,
        clock: Callable[[], float] = time.monotonic,
        device: str | None = None,
    ):
        self.total = total_bytes
        self.device = device
        self._emit: Emit = emit or (lambda event: None)
        self._clock = clock
        # Invariant: _reserved == sum of nbytes of _reservations; _cached == sum over _allocations;
        # _reserved + _cached <= total at every moment (admission checks before taking).
        self._reservations: dict[str, Reservation] = {}
        self._allocations: dict[str, CachedAllocation] = {}
        self._reserved = 0
        self._cached = 0
        self._peak = 0
        self._changed = asyncio.Event()
        self._emit(BudgetSet(at=clock(), total_bytes=total_bytes, device=device))

    # -- queries --------------------------------------------------------------------------------------

    @property
    def reserved(self) -> int:
        """Bytes held by live reservations."""
        return self._reserved

    @property
    def cached(self) -> int:
        """Bytes held by cached allocations."""
        return self._cached

    def stats(self) -> BudgetStats:
        """The budget's figures now."""
        return BudgetStats(
            self.total,
            self._reserved,
            self._cached,
            self._peak,
            len(self._reservations),
            len(self._allocations),
        )

    def allocations(self) -> list[CachedAllocation]:
        """The live cached allocations (a copy of the list)."""
        return list(self._allocations.values())

    def check(self) -> None:
        """Raise AssertionError if the budget's invariant does not hold."""
        assert self._reserved == sum(r.nbytes for r in self._reservations.values()), "reserved != sum"
        assert self._cached == sum(a.nbytes for a in self._allocations.values()), "cached != sum"
        assert self._reserved + self._cached <= self.total, "over budget"

    def could_ever_fit(self, nbytes: int) -> bool:
        """Whether ``nbytes`` fits the budget at all (with nothing else held)."""
        return nbytes <= self.total

    # -- taking bytes ---------------------------------------------------------------------------------

    def try_reserve(self, name: str, nbytes: int, *, headroom: int = 0) -> Reservation | None:
        """Reserve ``nbytes`` now if they fit (evicting idle cached allocations if needed), else None.

        ``headroom``: bytes that must stay free after this reservation (room for a proving key a worker
        will need), so reservations can never starve the keys that let them finish.
        """
        if name in self._reservations:
            raise ValueError(f"reservation {name!r} already exists")
        if not self._make_room(nbytes, headroom):
            return None
        reservation = Reservation(self, name, nbytes)
        self._reservations[name] = reservation
        self._reserved += nbytes
        self._note_peak()
        self._emit(ReservationMade(at=self._clock(), name=name, nbytes=nbytes, device=self.device))
        return reservation

    async def reserve(self, name: str, nbytes: int, *, headroom: int = 0) -> Reservation:
        """Reserve ``nbytes``, waiting until they fit. The caller checked ``could_ever_fit`` first."""
        while (reservation := self.try_reserve(name, nbytes, headroom=headroom)) is None:
            await self.wait_change()
        return reservation

    def try_cache(self, name: str, nbytes: int, on_evict: Callable[[], None]) -> CachedAllocation | None:
        """Hold a cached allocation now if it fits (evicting other idle ones if needed), else None."""
        if name in self._allocations:
            raise ValueError(f"allocation {name!r} already exists")
        if not self._make_room(nbytes):
            return None
        allocation = CachedAllocation(self, name, nbytes, on_evict)
        self._allocations[name] = allocation
        self._cached += nbytes
        self._note_peak()
        self._emit(AllocationCached(at=self._clock(), name=name, nbytes=nbytes, device=self.device))
        return allocation

    async def cache(self, name: str, nbytes: int, on_evict: Callable[[], None]) -> CachedAllocation:
        """Hold a cached allocation, waiting until it fits."""
        while (allocation := self.try_cache(name, nbytes, on_evict)) is None:
            await self.wait_change()
        return allocation

    async def wait_change(self) -> None:
        """Wait until some bytes are given back or an allocation becomes idle."""
        await self._changed.wait()

    # -- internals ------------------------------------------------------------------------------------

    def _make_room(self, nbytes: int, headroom: int = 0) -> bool:
        """Whether ``nbytes`` fit with ``headroom`` left over, counting idle allocations as free; evicts
        idle allocations (least recently used first) only as far as ``nbytes`` itself needs."""
        free = self.total - self._reserved - self._cached
        idle = sorted((a for a in self._allocations.values() if a.busy == 0), key=lambda a: a.last_used)
        if free + sum(a.nbytes for a in idle) < nbytes + headroom:
            return False
        if free >= nbytes:
            return True
        for allocation in idle:
            self._drop(allocation, call_back=True)
            free += allocation.nbytes
            if free >= nbytes:
                break
        return True

    def _drop(self, allocation: CachedAllocation, *, call_back: bool) -> None:
        if not allocation.live:
            return
        del self._allocations[allocation.name]
        self._cached -= allocation.nbytes
        self._emit(AllocationEvicted(at=self._clock(), name=allocation.name, device=self.device))
        if call_back:
            allocation._on_evict()
        self._wake()

    def _note_peak(self) -> None:
        self._peak = max(self._peak, self._reserved + self._cached)

    def _wake(self) -> None:
        # Wake every waiter; each re-checks. A fresh Event for the next round keeps waiting cheap.
        self._changed.set()
        self._changed = asyncio.Event()
