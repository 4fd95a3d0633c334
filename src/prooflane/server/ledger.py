"""Who holds a server's connections, and whose to close when one more arrives: the fair shares of
:mod:`.limits`, apart from how a connection behaves.

- :class:`ConnectionLimits`: the caps, from the config's keys (:class:`ServerKeys`).
- :class:`Ledger`: each client's connections (:func:`client_of`), the streams and the uploads among them, and
  the refused connections still lingering; the order in which room is made (:meth:`Ledger.make_room`) and
  the reserve kept for short requests (:meth:`Ledger.admit_held`).

The ledger asks a connection only what :class:`Holder` says, so that the rules read apart from uvicorn's
protocol class.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, Protocol

from .descriptors import FD_RESERVE, connection_cap

__all__ = ["MAX_LINGERING", "ConnectionLimits", "Holder", "Ledger", "ServerKeys", "client_of"]

MAX_LINGERING = FD_RESERVE // 4
"""Refused connections lingering at once (they no longer count at the caps): their descriptors come out of
those kept for the process's own use, so past this many a refused connection is closed at once."""


class ServerKeys(Protocol):
    """The config keys of an HTTP server's limits (the daemon's config and the fleet's both have them)."""

    @property
    def request_timeout_secs(self) -> float: ...

    @property
    def max_connections(self) -> int: ...

    @property
    def max_connections_per_client(self) -> int: ...

    @property
    def max_streams(self) -> int: ...

    @property
    def reserved_connections(self) -> int: ...

    @property
    def min_upload_bytes_per_sec(self) -> int: ...


@dataclass(frozen=True)
class ConnectionLimits:
    """What the clients of one server may hold, and how long they have (see :mod:`.limits`)."""

    request_timeout: float
    """Seconds a client has to send a whole request, or to take an answer; an upload's window."""
    max_connections: int
    """Connections at once, all clients together."""
    max_per_client: int
    """Connections at once from one client (:func:`client_of`)."""
    max_streams: int
    """Event streams and long-polls at once, all clients together."""
    reserved: int = 0
    """Connections kept for short requests: uploads, streams and long-polls hold at most the rest
    (:attr:`held_cap`, :attr:`client_held_cap`)."""
    min_upload_rate: float = 0.0
    """Bytes a second an upload must bring over each window after its first (0: none; :mod:`.upload_rate`)."""

    @classmethod
    def of(cls, config: ServerKeys) -> ConnectionLimits:
        """The config's limits, ``max_connections`` lowered to what the open-files limit holds."""
        return cls(
            config.request_timeout_secs,
            connection_cap(config.max_connections),
            config.max_connections_per_client,
            config.max_streams,
            config.reserved_connections,
            config.min_upload_bytes_per_sec,
        )

    @property
    def client_cap(self) -> int:
        """Connections one client may hold."""
        return max(1, min(self.max_per_client, self.max_connections))

    @property
    def stream_cap(self) -> int:
        """Streams at once: ``max_streams``, and never more than half the connections (the rest stay for
        short requests)."""
        return max(1, min(self.max_streams, self.max_connections // 2))

    @property
    def held_cap(self) -> int:
        """Uploads, streams and long-polls at once, all clients together: the connections less the reserve
        (the reserve never more than half of them)."""
        return self.max_connections - min(self.reserved, self.max_connections // 2)

    @property
    def client_held_cap(self) -> int:
        """Uploads, streams and long-polls at once from one client: its connections less the reserve (never
        more than half of them)."""
        return self.client_cap - min(self.reserved, self.client_cap // 2)


def client_of(peername: Any) -> str:
    """Who a connection counts against: its peer's IPv4 address (an IPv4-mapped IPv6 one as IPv4), or its
    IPv6 /64 (one machine's usual share); ``local`` for a socket without an address."""
    host = peername[0] if isinstance(peername, tuple) and peername else ""
    try:
        address = ipaddress.ip_address(str(host).split("%", 1)[0])
    except ValueError:
        return str(host) or "local"
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(address)


class Holder(Protocol):
    """What the ledger asks of a connection."""

    @property
    def peer(self) -> str:
        """Its client (:func:`client_of`)."""

    @property
    def opened_at(self) -> float:
        """When it was admitted (the event loop's clock)."""

    @property
    def idle(self) -> bool:
        """Connected, nothing asked (or kept alive between requests)."""

    @property
    def incomplete(self) -> bool:
        """A request begun and not received in full, nothing answered yet (not an upload's body)."""

    @property
    def stream_started_at(self) -> float | None:
        """When its stream or long-poll began; None when it serves none (or it is ending)."""

    @property
    def upload_started_at(self) -> float | None:
        """When its upload's body began to stream; None when none streams."""

    def slowness(self) -> str | None:
        """Why its upload counts as slow (past its grace, under the minimum rate), or None."""

    def refuse(self, status: int, reason: str, detail: str, linger: float) -> None:
        """Answer ``status`` and close (after ``linger`` seconds at most); it stops counting at once."""

    def close_idle(self) -> None:
        """Close it (idle: nothing to answer); it stops counting at once."""

    def end_stream(self) -> None:
        """End its stream cleanly to make room; it stops counting at once."""


class Ledger:
    """Who holds one server's connections. Only the event loop touches it (no lock). Invariants: a
    connection is in ``by_client[its peer]`` and in ``every`` from its admission until it is closed, refused
    or made room for; in ``streams`` while it serves a stream and in ``uploads`` while an upload's body
    streams in (never once refused or made room for); ``lingering`` counts the refused connections not yet
    closed that took one of the ``MAX_LINGERING`` places."""

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.by_client: dict[str, set[Holder]] = {}
        self.every: set[Holder] = set()  # the union of by_client's sets
        self.streams: set[Holder] = set()
        self.uploads: set[Holder] = set()
        self.lingering = 0

    def admit(self, connection: Holder) -> None:
        self.by_client.setdefault(connection.peer, set()).add(connection)
        self.every.add(connection)

    def leave(self, connection: Holder) -> None:
        """Stop counting ``connection``: its place is free now."""
        mine = self.by_client.get(connection.peer)
        if mine is not None:
            mine.discard(connection)
            if not mine:
                del self.by_client[connection.peer]
        self.every.discard(connection)
        self.streams.discard(connection)
        self.uploads.discard(connection)

    def take_lingering_place(self) -> bool:
        """Whether one more refused connection may linger (it holds a place until :meth:`left_lingering`)."""
        if self.lingering >= MAX_LINGERING:
            return False
        self.lingering += 1
        return True

    def left_lingering(self) -> None:
        self.lingering -= 1

    def held(self, client: str | None = None) -> set[Holder]:
        """The uploads, streams and long-polls in progress (``client``'s only, when named)."""
        held = self.streams | self.uploads
        return held if client is None else {c for c in held if c.peer == client}

    def make_room(self, client: str) -> str | None:
        """None when a new connection of ``client`` may be served (after one was closed to make room, if
        need be); else why not."""
        limits = self.limits
        mine = self.by_client.get(client, set())
        if len(mine) >= limits.client_cap and not _make_room_among(mine):
            return f"too many connections from {client} (at most {limits.client_cap} from one client)"
        if len(self.every) >= limits.max_connections and not _make_room_among(set(self.every)):
            return f"too many connections (at most {limits.max_connections})"
        return None

    def admit_held(self, client: str) -> str | None:
        """None when one more upload, stream or long-poll of ``client``'s may start (after cutting a slow
        upload, if need be); else why not: the last connections are kept for short requests."""
        kept = "are kept for short requests such as /healthz: try again"
        cap = self.limits.client_held_cap
        if len(self.held(client)) >= cap and not _cut_slowest(self.held(client)):
            return (f"too many uploads, event streams and long-polls from {client} at once (at most {cap}; "
                    f"its other connections {kept})")  # fmt: skip
        cap = self.limits.held_cap
        if len(self.held()) >= cap and not _cut_slowest(self.held()):
            return (
                f"too many uploads, event streams and long-polls at once (at most {cap}; the others {kept})"
            )
        return None

    def admit_stream(self, client: str) -> str | None:
        """None when one more stream of ``client``'s may start (after ending another client's, if that one
        holds at least two more); else why not."""
        cap = self.limits.stream_cap
        if len(self.streams) < cap:
            return None
        held = Counter(c.peer for c in self.streams)
        heaviest, most = held.most_common(1)[0]
        if most > held[client] + 1:
            _oldest([c for c in self.streams if c.peer == heaviest], _stream_start).end_stream()
            return None
        return f"too many event streams and long-polls (at most {cap} at once): try again"


def _make_room_among(candidates: Collection[Holder]) -> bool:
    """Close one of ``candidates`` to make room for a new connection: the oldest slow upload (answered 408),
    else the one idle the longest, else the oldest request not received in full (answered 408), else the
    oldest stream of the client holding the most; False when none is left (every one is a short request or
    an upload that keeps its rate)."""
    if _cut_slowest(candidates):
        return True
    idle = [c for c in candidates if c.idle]
    if idle:
        _oldest(idle, _opened).close_idle()
        return True
    incomplete = [c for c in candidates if c.incomplete]
    if incomplete:
        detail = "request not received in full: its connection was closed to make room for another"
        _oldest(incomplete, _opened).refuse(
            408, "Request Timeout", detail, 0.0
        )  # its descriptor is wanted now
        return True
    streams = [c for c in candidates if c.stream_started_at is not None]
    if streams:
        heaviest, _ = Counter(c.peer for c in streams).most_common(1)[0]
        _oldest([c for c in streams if c.peer == heaviest], _stream_start).end_stream()
        return True
    return False


def _cut_slowest(candidates: Collection[Holder]) -> bool:
    """Answer 408 to the oldest slow upload of ``candidates``, closing it at once; False when none is slow."""
    slow = {c: why for c in candidates if (why := c.slowness()) is not None}
    if not slow:
        return False
    oldest = _oldest(list(slow), _upload_start)
    oldest.refuse(408, "Request Timeout", slow[oldest], 0.0)  # its descriptor is wanted now
    return True


def _oldest(connections: list[Holder], key: Callable[[Holder], float]) -> Holder:
    return min(connections, key=key)


def _opened(connection: Holder) -> float:
    return connection.opened_at


def _stream_start(connection: Holder) -> float:
    return connection.stream_started_at or 0.0


def _upload_start(connection: Holder) -> float:
    return connection.upload_started_at or 0.0
