"""Following one daemon: its ``/status`` every ``poll_secs``, and at once whenever its event stream
(``/v1/events``) says something happened (at most every ``MIN_FETCH_GAP_SECS``); without an event stream it
simply polls. Every request is bounded by ``timeout_secs``; failures back off (doubling from ``poll_secs``
up to ``backoff_max_secs``) and the next success resets that. A slow or hung daemon only ever holds its own
follower's tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx

from ..errors import TunnelError
from ..logs import one_line
from ..status.ages import advance
from .config import DaemonSpec, FleetConfig
from .ssh import SshTunnels
from .view import DaemonFacts

__all__ = ["FETCH_ERRORS", "MAX_EVENT_LINE_BYTES", "AnswerTooLarge", "DaemonFollower", "describe_failure"]

log = logging.getLogger("prooflane.fleet")

MIN_FETCH_GAP_SECS = 0.2  # events come in bursts under load: at most 5 fetches of /status a second
MAX_EVENT_LINE_BYTES = 1 << 20
"""The longest line of a daemon's event stream the fleet reads (an event's data is a few hundred bytes)."""


_ENCODING_HEADERS = frozenset({"content-encoding", "content-length", "transfer-encoding"})


class AnswerTooLarge(ValueError):
    """Raised when a daemon sends more than the fleet reads of it (``max_answer_bytes``, or a line of its
    event stream over ``MAX_EVENT_LINE_BYTES``)."""


FETCH_ERRORS = (httpx.HTTPError, TunnelError, ValueError, TimeoutError, OSError)
"""What following a daemon may meet that says the daemon (or the way to it) is in trouble."""


class DaemonFollower:
    """Follows one daemon and keeps the facts the fleet shows of it.

    Only this follower's own tasks write its fields, on the event loop (no locks). ``failures`` counts failed
    attempts since the last good snapshot; ``snapshot`` is the last good one and ``received_at`` its arrival
    on ``clock``.
    """

    def __init__(
        self,
        spec: DaemonSpec,
        config: FleetConfig,
        tunnels: SshTunnels,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.spec = spec
        self.config = config
        self.tunnels = tunnels
        self.clock = clock
        self.snapshot: dict[str, Any] | None = None
        self.received_at: float | None = None
        self.received_wall: float | None = None
        self.failures = 0
        self.last_error: str | None = None
        self.last_error_wall: float | None = None
        self.feed = "polling"
        self._away_since: float | None = None  # on clock: the first failed attempt since the last good one
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()  # set, then replaced, on every new snapshot or failure
        self._client: httpx.AsyncClient | None = None
        self._socket: Path | None = None
        self._etag: str | None = None  # the last /status answer's, sent back as If-None-Match
        # GET /status answers since the start: all, those 304 (the snapshot kept, moved on), bytes received
        self.status_fetches = 0
        self.status_not_modified = 0
        self.status_bytes = 0

    def facts(self) -> DaemonFacts:
        """A frozen copy of what is known now."""
        return DaemonFacts(
            name=self.spec.name,
            where=self.spec.where,
            snapshot=self.snapshot,
            received_at=self.received_at,
            received_wall=self.received_wall,
            failures=self.failures,
            last_error=self.last_error,
            last_error_wall=self.last_error_wall,
            feed=self.feed,
            cost_per_hour=self.spec.cost_per_hour,
            price_per_proof=self.config.price_per_proof,
            deploy_dir=self.spec.deploy_dir,
            status_fetches=self.status_fetches,
            status_not_modified=self.status_not_modified,
            status_bytes=self.status_bytes,
        )

    async def changed(self) -> None:
        """Return after the next new snapshot or failed attempt."""
        await self._changed.wait()

    async def run(self) -> None:
        """Follow the daemon until cancelled: the poll loop and the event stream, side by side."""
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self._poll_loop(), name=f"fleet-poll:{self.spec.name}")
                group.create_task(self._events_loop(), name=f"fleet-events:{self.spec.name}")
        finally:
            if self._client is not None:
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._client.aclose())

    async def get(self, path: str, params: Mapping[str, str] | None = None) -> httpx.Response:
        """``GET path`` on the daemon, bounded by ``timeout_secs`` as a whole (connect to last byte) and by
        ``max_answer_bytes`` (:class:`AnswerTooLarge`: a daemon, or whatever answers at its address, cannot
        make the fleet hold more)."""
        return await self.request("GET", path, params=params)

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        """``method path`` on the daemon with its token, bounded as :meth:`get` is."""
        client = await self.http()
        limit = self.config.max_answer_bytes
        async with asyncio.timeout(self.config.timeout_secs):
            async with client.stream(method, path, params=params, content=content, headers=headers) as answer:
                declared = answer.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > limit:
                    raise AnswerTooLarge(f"{path} answered {int(declared)} bytes, more than the {limit} read")
                body = bytearray()
                async for chunk in answer.aiter_bytes():
                    body += chunk
                    if len(body) > limit:
                        raise AnswerTooLarge(f"{path} answered more than the {limit} bytes read")
                if path == "/status":
                    self.status_bytes += answer.num_bytes_downloaded  # as sent (gzipped or not)
            # The body is decoded already (a gzipped /status): the headers must not say it is still encoded.
            kept = [(k, v) for k, v in answer.headers.items() if k.lower() not in _ENCODING_HEADERS]
            return httpx.Response(answer.status_code, headers=kept, content=bytes(body),
                                  request=answer.request)  # fmt: skip

    # --- the two loops ----------------------------------------------------------------------------

    async def _poll_loop(self) -> None:
        while True:
            self._wake.clear()
            try:
                self._good(await self._fetch_status())
                delay = self.config.poll_secs
            except FETCH_ERRORS as exc:
                self._bad(exc)
                delay = self._backoff(self.failures)
            except Exception as exc:  # a bug must not end the following; it is shown as the error
                log.exception("following %s", self.spec.name)
                self._bad(exc)
                delay = self._backoff(self.failures)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._wake.wait()
                    await asyncio.sleep(MIN_FETCH_GAP_SECS)  # woken by an event: let a burst gather

    async def _events_loop(self) -> None:
        attempt = 0
        while True:
            got_events = False
            try:
                client = await self.http()
                timeout = httpx.Timeout(self.config.timeout_secs, read=self.config.events_idle_secs)
                async with client.stream("GET", "/v1/events", timeout=timeout) as answer:
                    if answer.status_code != 200:
                        raise ValueError(f"/v1/events answered {answer.status_code}")
                    self.feed = "events"
                    pending = b""  # the line not yet ended: bounded, never a whole stream without newlines
                    async for chunk in answer.aiter_bytes():
                        *lines, pending = (pending + chunk).split(b"\n")
                        if any(line.startswith(b"event:") for line in lines):
                            got_events = True
                            self._wake.set()
                        if len(pending) > MAX_EVENT_LINE_BYTES:
                            raise AnswerTooLarge(f"/v1/events sent a line over {MAX_EVENT_LINE_BYTES} bytes")
            except FETCH_ERRORS:
                pass  # the poll loop reports the daemon's health; the stream just tries again
            finally:
                self.feed = "polling"
            attempt = 0 if got_events else attempt + 1
            await asyncio.sleep(self._backoff(max(attempt, 1)))

    def _backoff(self, failures: int) -> float:
        doubled: float = self.config.poll_secs * 2.0 ** min(failures - 1, 16)
        return min(doubled, self.config.backoff_max_secs)

    # --- fetching -----------------------------------------------------------------------------------

    async def _fetch_status(self) -> dict[str, Any]:
        """The daemon's snapshot now: a new one, or, when it answers 304 to the last one's ETag, the one kept
        moved on by the time since it came (``prooflane.status.ages``: only the clock moved)."""
        kept = self.snapshot
        etag = self._etag if kept is not None and self.failures == 0 else None
        headers = {"If-None-Match": etag} if etag else None
        answer = await self.request("GET", "/status", headers=headers)
        self.status_fetches += 1
        if answer.status_code == 304 and kept is not None and self.received_at is not None:
            self.status_not_modified += 1
            return advance(kept, self.clock() - self.received_at)
        if answer.status_code != 200:
            raise ValueError(f"/status answered {answer.status_code}: {answer.text[:200]}")
        snapshot = answer.json()
        if not isinstance(snapshot, dict) or not isinstance(snapshot.get("seq"), int):
            raise ValueError("/status did not answer a prooflane snapshot (no integer 'seq')")
        self._etag = answer.headers.get("etag")
        return snapshot

    async def http(self) -> httpx.AsyncClient:
        """The HTTP client for this daemon; over SSH, through the host's tunnel (reopened when needed)."""
        if self.spec.ssh:
            socket = await self.tunnels.socket_for(self.spec)
            if socket != self._socket or self._client is None:
                await self._drop_client()
                self._socket = socket
                transport = httpx.AsyncHTTPTransport(uds=str(socket))
                # The tunnel ends on the daemon's loopback port: "localhost" is a Host it always accepts.
                self._client = self._new_client("http://localhost", transport)
        elif self._client is None:
            self._client = self._new_client(self.spec.url, None)
        return self._client

    def _new_client(self, base: str, transport: httpx.AsyncHTTPTransport | None) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {self.spec.token}"} if self.spec.token else {}
        return httpx.AsyncClient(
            base_url=base, transport=transport, headers=headers, timeout=self.config.timeout_secs
        )

    async def _drop_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    def _good(self, snapshot: dict[str, Any]) -> None:
        before = self.snapshot
        key = (snapshot.get("boot_id"), snapshot["seq"])
        news = self.failures > 0 or before is None or (before.get("boot_id"), before.get("seq")) != key
        self.snapshot = snapshot
        self.received_at = self.clock()
        self.received_wall = time.time()
        if self.failures:
            self._log_back(first=before is None)
        if before is None or before.get("boot_id") != snapshot.get("boot_id"):
            self._log_warnings(snapshot)
        self.failures = 0
        if news:
            self.notify()

    def _bad(self, exc: BaseException) -> None:
        self.failures += 1
        self.last_error = describe_failure(exc)
        self.last_error_wall = time.time()
        if self.failures == 1:
            self._log_away()
        if self.spec.ssh and isinstance(exc, httpx.TransportError):
            self._socket = None  # the forward may be gone with its master: ask the tunnels again
        self.notify()

    def _log_away(self) -> None:
        """One line when the daemon stops answering (not one per failed attempt)."""
        self._away_since = self.clock()
        reason = one_line(self.last_error or "")
        log.warning(
            "daemon %s (%s) unreachable: %s", self.spec.name, self.spec.where, reason,
            extra={"daemon": self.spec.name, "where": self.spec.where, "reason": reason, "reachable": False},
        )  # fmt: skip

    def _log_back(self, *, first: bool) -> None:
        """One line when it answers again, with how long it did not (``first``: it never had before)."""
        now, since = self.clock(), self._away_since
        away = 0.0 if since is None else max(0.0, now - since)
        self._away_since = None
        log.info(
            "daemon %s (%s) %s %.1f s %s", self.spec.name, self.spec.where,
            "answers for the first time after" if first else "back after", away,
            "unreachable" if first else "away",
            extra={"daemon": self.spec.name, "where": self.spec.where, "reachable": True,
                   "away_secs": round(away, 3)},
        )  # fmt: skip

    def _log_warnings(self, snapshot: Mapping[str, Any]) -> None:
        """One line per warning of the daemon's health (a curve proved on the libraries, say), once per boot:
        they hold for the daemon's life."""
        health = snapshot.get("health")
        warnings = health.get("warnings") if isinstance(health, Mapping) else None
        for warning in warnings if isinstance(warnings, list) else []:
            said = one_line(str(warning))
            log.warning(
                "daemon %s (%s): %s", self.spec.name, self.spec.where, said,
                extra={"daemon": self.spec.name, "where": self.spec.where, "warning": said},
            )  # fmt: skip

    def notify(self) -> None:
        """Wake whoever waits in :meth:`changed` (a new snapshot, a failure, or the end of following)."""
        self._changed.set()
        self._changed = asyncio.Event()


def describe_failure(exc: BaseException) -> str:
    """A failure to reach a daemon, in words for the page."""
    if isinstance(exc, TimeoutError | httpx.TimeoutException):
        return "no answer in time"
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
