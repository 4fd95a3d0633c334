"""The fleet service: many daemons, one page. A client of each daemon's HTTP API, nothing more.

``prooflane fleet --config fleet.toml`` follows every daemon in the config, each with its own task: the task
fetches ``/status`` every ``poll_secs`` and at once whenever the daemon's event stream (``/v1/events``) says
something happened (at most every ``_MIN_FETCH_GAP_SECS``); without an event stream it simply polls. Every
request is bounded by ``timeout_secs``; failures back off (doubling from ``poll_secs`` up to
``backoff_max_secs``) and the next success resets that. A slow or hung daemon therefore only ever holds its
own task: the fleet's answers are built from what each task last stored, and never wait on a daemon.

The fleet watches and manages; it does not schedule. Pooling machines into one engine is the Ray backend's
job; the fleet only shows which daemons are Ray-backed and their nodes, when their ``/status`` says so.

Routes: ``GET /fleet/status``, ``GET /fleet/metrics``, ``GET /healthz``, ``POST /fleet/daemons``,
``DELETE /fleet/daemons/{name}``, ``GET /`` (the fleet page) and ``/d/{name}/`` (the daemon's own dashboard,
served by the fleet from its cached snapshot). See docs/fleet.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import json
import logging
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

import httpx
from fastapi import FastAPI, Header, HTTPException, Request, Response
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, PlainTextResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles

from .._version import __version__
from ..errors import ConfigError, TunnelError
from .config import DaemonSpec, FleetConfig
from .ssh import SshTunnels
from .view import DaemonFacts, daemon_entry, fleet_metrics, fleet_totals, relabel_metrics

__all__ = ["DaemonFollower", "Fleet", "create_fleet_app", "run_fleet"]

log = logging.getLogger("prooflane.fleet")

PAGE = Path(__file__).resolve().parent / "page"
DASHBOARD = Path(__file__).resolve().parents[1] / "dashboard"
_DASHBOARD_ASSETS = frozenset({"app.js", "charts.js", "format.js", "style.css"})
_MIN_FETCH_GAP_SECS = 0.2  # events come in bursts under load: at most 5 fetches of /status a second
_PANEL_HEARTBEAT_SECS = 15.0
_METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_FETCH_ERRORS = (httpx.HTTPError, TunnelError, ValueError, TimeoutError, OSError)


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
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()  # set, then replaced, on every new snapshot or failure
        self._client: httpx.AsyncClient | None = None
        self._socket: Path | None = None

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
        """``GET path`` on the daemon, bounded by ``timeout_secs`` as a whole (connect to last byte)."""
        client = await self._http()
        async with asyncio.timeout(self.config.timeout_secs):
            return await client.get(path, params=params)

    # --- the two loops ----------------------------------------------------------------------------

    async def _poll_loop(self) -> None:
        while True:
            self._wake.clear()
            try:
                self._good(await self._fetch_status())
                delay = self.config.poll_secs
            except _FETCH_ERRORS as exc:
                self._bad(exc)
                delay = self._backoff(self.failures)
            except Exception as exc:  # a bug must not end the following; it is shown as the error
                log.exception("following %s", self.spec.name)
                self._bad(exc)
                delay = self._backoff(self.failures)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._wake.wait()
                    await asyncio.sleep(_MIN_FETCH_GAP_SECS)  # woken by an event: let a burst gather

    async def _events_loop(self) -> None:
        attempt = 0
        while True:
            got_events = False
            try:
                client = await self._http()
                timeout = httpx.Timeout(self.config.timeout_secs, read=self.config.events_idle_secs)
                async with client.stream("GET", "/v1/events", timeout=timeout) as answer:
                    if answer.status_code != 200:
                        raise ValueError(f"/v1/events answered {answer.status_code}")
                    self.feed = "events"
                    async for line in answer.aiter_lines():
                        if line.startswith("event:"):
                            got_events = True
                            self._wake.set()
            except _FETCH_ERRORS:
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
        answer = await self.get("/status")
        if answer.status_code != 200:
            raise ValueError(f"/status answered {answer.status_code}: {answer.text[:200]}")
        snapshot = answer.json()
        if not isinstance(snapshot, dict) or not isinstance(snapshot.get("seq"), int):
            raise ValueError("/status did not answer a prooflane snapshot (no integer 'seq')")
        return snapshot

    async def _http(self) -> httpx.AsyncClient:
        """The HTTP client for this daemon; over SSH, through the host's tunnel (reopened when needed)."""
        if self.spec.ssh:
            socket = await self.tunnels.socket_for(self.spec)
            if socket != self._socket or self._client is None:
                await self._drop_client()
                self._socket = socket
                transport = httpx.AsyncHTTPTransport(uds=str(socket))
                self._client = self._new_client("http://daemon", transport)
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
        self.failures = 0
        if news:
            self.notify()

    def _bad(self, exc: BaseException) -> None:
        self.failures += 1
        self.last_error = _describe(exc)
        self.last_error_wall = time.time()
        if self.spec.ssh and isinstance(exc, httpx.TransportError):
            self._socket = None  # the forward may be gone with its master: ask the tunnels again
        self.notify()

    def notify(self) -> None:
        """Wake whoever waits in :meth:`changed` (a new snapshot, a failure, or the end of following)."""
        self._changed.set()
        self._changed = asyncio.Event()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError | httpx.TimeoutException):
        return "no answer in time"
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class FleetConflict(Exception):
    """Raised when a daemon is added under a name the fleet already has."""


class Fleet:
    """The daemons being followed, in config order; adds and removes them, saving the config file."""

    def __init__(
        self,
        config: FleetConfig,
        config_path: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.config_path = config_path
        self.clock = clock
        self.tunnels = SshTunnels(config.timeout_secs)
        self.followers: dict[str, DaemonFollower] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.closing = asyncio.Event()

    async def start(self) -> None:
        """Start one task per configured daemon."""
        for spec in self.config.daemons:
            self._spawn(spec)

    async def close(self) -> None:
        """Stop every follower and end the SSH tunnels."""
        self.closing.set()
        for name in list(self._tasks):
            await self._stop(name)
        await self.tunnels.close()

    async def add(self, spec: DaemonSpec) -> None:
        """Follow one more daemon and save the config; :class:`FleetConflict` when the name is taken."""
        if spec.name in self.followers:
            raise FleetConflict(f"a daemon named {spec.name!r} is already in the fleet")
        self._save(dataclasses.replace(self.config, daemons=(*self.config.daemons, spec)))
        self._spawn(spec)

    async def remove(self, name: str) -> bool:
        """Stop following ``name`` and save the config; False when there is no such daemon."""
        if name not in self.followers:
            return False
        kept = tuple(d for d in self.config.daemons if d.name != name)
        self._save(dataclasses.replace(self.config, daemons=kept))
        spec = self.followers[name].spec
        await self._stop(name)
        if spec.ssh:
            await self.tunnels.forget(spec)
        return True

    def status(self, *, snapshots: bool = True) -> dict[str, Any]:
        """``GET /fleet/status``: every daemon's entry and the fleet's totals, from stored facts only.
        Without ``snapshots``, the entries leave out the daemons' whole snapshots (the page needs rows)."""
        entries = self.entries()
        if not snapshots:
            entries = [{k: v for k, v in e.items() if k != "snapshot"} for e in entries]
        return {
            "version": __version__,
            "taken_at": time.time(),
            "stale_after_secs": self.config.stale_after_secs,
            "daemons": entries,
            "totals": fleet_totals(entries),
        }

    def entries(self) -> list[dict[str, Any]]:
        """One entry per daemon, in config order."""
        now = self.clock()
        return [daemon_entry(f.facts(), now, self.config.stale_after_secs) for f in self.followers.values()]

    async def metrics(self) -> str:
        """Every reachable daemon's ``/metrics`` labelled by daemon, then the fleet's own gauges."""
        entries = self.entries()
        up = [self.followers[e["name"]] for e in entries if e["health"] == "up"]
        answers = await asyncio.gather(*(f.get("/metrics") for f in up), return_exceptions=True)
        texts = [
            (f.spec.name, a.text)
            for f, a in zip(up, answers, strict=True)
            if isinstance(a, httpx.Response) and a.status_code == 200
        ]
        return relabel_metrics(texts) + fleet_metrics(entries)

    def health(self) -> dict[str, Any]:
        """``GET /healthz``: the fleet service runs; how many daemons answer."""
        entries = self.entries()
        return {
            "ok": True,
            "version": __version__,
            "daemons": len(entries),
            "reachable": sum(1 for e in entries if e["reachable"]),
            "up": sum(1 for e in entries if e["health"] == "up"),
            "unreachable": [e["name"] for e in entries if not e["reachable"]],
            "ssh_masters": self.tunnels.masters(),
        }

    def _spawn(self, spec: DaemonSpec) -> None:
        follower = DaemonFollower(spec, self.config, self.tunnels, self.clock)
        self.followers[spec.name] = follower
        self._tasks[spec.name] = asyncio.create_task(follower.run(), name=f"fleet:{spec.name}")

    async def _stop(self, name: str) -> None:
        task = self._tasks.pop(name)
        follower = self.followers.pop(name, None)
        task.cancel()
        if follower is not None:
            follower.notify()  # ends the dashboard event streams that follow it
        with contextlib.suppress(asyncio.CancelledError):
            await task

    def _save(self, config: FleetConfig) -> None:
        """Save the new daemon list into the config file, keeping the file's other keys as they are there
        (command-line overrides such as ``--port`` are not written)."""
        if self.config_path is not None:
            on_disk = FleetConfig.load(self.config_path)
            dataclasses.replace(on_disk, daemons=config.daemons).save(self.config_path)
        self.config = config


# --- HTTP --------------------------------------------------------------------------------------


def create_fleet_app(fleet: Fleet) -> FastAPI:
    """The fleet's HTTP application."""
    app = FastAPI(title="prooflane fleet", version=__version__, docs_url="/docs", redoc_url=None)
    app.state.fleet = fleet
    _add_fleet_routes(app, fleet)
    _add_panel_routes(app, fleet)
    app.mount("/", StaticFiles(directory=PAGE, html=True), name="fleet-page")
    return app


def _add_fleet_routes(app: FastAPI, fleet: Fleet) -> None:
    def require_token(authorization: str | None) -> None:
        if not fleet.config.token:
            raise HTTPException(403, "the fleet config sets no token: set `token` to change daemons here")
        expected = f"Bearer {fleet.config.token}".encode()
        if not hmac.compare_digest((authorization or "").encode(), expected):
            raise HTTPException(401, "this route needs 'Authorization: Bearer <token>' (the fleet's token)",
                                headers={"WWW-Authenticate": "Bearer"})  # fmt: skip

    @app.get("/fleet/status")
    async def status(snapshots: bool = True) -> JSONResponse:
        """Every daemon's last snapshot, its age and health, and the fleet's totals;
        `?snapshots=false` leaves the snapshots out."""
        return JSONResponse(fleet.status(snapshots=snapshots))

    @app.get("/fleet/metrics", response_class=PlainTextResponse)
    async def metrics() -> PlainTextResponse:
        """Prometheus text: each reachable daemon's metrics labelled `daemon`, and the fleet's gauges."""
        return PlainTextResponse(await fleet.metrics(), media_type=_METRICS_CONTENT_TYPE)

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        """200 while the fleet service runs, with how many daemons are reachable."""
        return JSONResponse(fleet.health())

    @app.post("/fleet/daemons", status_code=201)
    async def add(request: Request, authorization: Annotated[str | None, Header()] = None) -> JSONResponse:
        """Add a daemon (a JSON object with the keys of one `[[daemons]]` table); saved in the config."""
        require_token(authorization)
        try:
            body = await request.json()
        except ValueError:
            raise HTTPException(422, "expected a JSON object with the keys of a [[daemons]] table") from None
        if not isinstance(body, dict):
            raise HTTPException(422, "expected a JSON object with the keys of a [[daemons]] table")
        try:
            spec = DaemonSpec.from_dict(body, source="daemon")
            await fleet.add(spec)
        except ConfigError as exc:
            raise HTTPException(422, str(exc)) from None
        except FleetConflict as exc:
            raise HTTPException(409, str(exc)) from None
        except OSError as exc:
            raise HTTPException(500, f"cannot save the fleet config: {exc}") from None
        return JSONResponse({"name": spec.name, "where": spec.where}, status_code=201)

    @app.delete("/fleet/daemons/{name}")
    async def remove(name: str, authorization: Annotated[str | None, Header()] = None) -> JSONResponse:
        """Stop following a daemon; saved in the config."""
        require_token(authorization)
        try:
            removed = await fleet.remove(name)
        except OSError as exc:
            raise HTTPException(500, f"cannot save the fleet config: {exc}") from None
        if not removed:
            raise HTTPException(404, f"no daemon named {name!r} in the fleet")
        return JSONResponse({"removed": name})


def _add_panel_routes(app: FastAPI, fleet: Fleet) -> None:
    """``/d/{name}/``: the daemon's own dashboard, fed by the fleet (one connection per daemon, whatever the
    number of pages open)."""

    def follower(name: str) -> DaemonFollower:
        found = fleet.followers.get(name)
        if found is None:
            raise HTTPException(404, f"no daemon named {name!r} in the fleet")
        return found

    @app.get("/d/{name}/", response_class=HTMLResponse)
    async def panel(name: str) -> HTMLResponse:
        follower(name)
        page = (DASHBOARD / "index.html").read_text()
        label = json.dumps(f"daemon {name}, through the fleet")  # a JSON string is a safe attribute value
        return HTMLResponse(page.replace("<body ", f"<body data-daemon={label} ", 1))

    @app.get("/d/{name}/status")
    async def status(name: str) -> Response:
        found = follower(name)
        entry = daemon_entry(found.facts(), fleet.clock(), fleet.config.stale_after_secs)
        if entry["health"] != "up" or found.snapshot is None:
            age = entry["snapshot_age_secs"]
            since = "never answered" if age is None else f"last good snapshot {age:.1f} s ago"
            why = entry["last_error"] or "no error yet"
            detail = f"daemon {name!r} is {entry['health']} ({since}): {why}"
            return JSONResponse({"detail": detail, "health": entry["health"]}, status_code=503)
        return Response(json.dumps(found.snapshot), media_type="application/json")

    @app.get("/d/{name}/v1/events")
    async def events(name: str) -> StreamingResponse:
        stream = _panel_events(fleet, follower(name))
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return StreamingResponse(stream, media_type="text/event-stream", headers=headers)

    @app.get("/d/{name}/metrics")
    async def metrics(name: str) -> Response:
        return await _relay(follower(name), "/metrics", {})

    @app.get("/d/{name}/v1/jobs")
    async def jobs(name: str, request: Request) -> Response:
        return await _relay(follower(name), "/v1/jobs", dict(request.query_params))

    @app.get("/d/{name}/v1/jobs/{job_id}")
    async def job(name: str, job_id: str) -> Response:
        return await _relay(follower(name), f"/v1/jobs/{quote(job_id, safe='')}", {})

    @app.get("/assets/{asset}")
    async def shared_asset(asset: str) -> FileResponse:
        """The dashboard's files, for the fleet page's own use (its style sheet, the number formats)."""
        if asset not in _DASHBOARD_ASSETS:
            raise HTTPException(404, f"no file {asset!r} in the dashboard")
        return FileResponse(DASHBOARD / asset)

    @app.get("/d/{name}/{asset}")
    async def asset(name: str, asset: str) -> FileResponse:
        follower(name)
        if asset not in _DASHBOARD_ASSETS:
            raise HTTPException(404, f"no file {asset!r} in the dashboard")
        return FileResponse(DASHBOARD / asset)


async def _relay(found: DaemonFollower, path: str, params: dict[str, str]) -> Response:
    """A read-only GET passed through to the daemon, bounded like every other request."""
    try:
        answer = await found.get(path, params)
    except _FETCH_ERRORS as exc:
        raise HTTPException(502, f"daemon {found.spec.name!r}: {_describe(exc)}") from None
    kind = answer.headers.get("content-type", "application/octet-stream")
    return Response(answer.content, status_code=answer.status_code, media_type=kind)


async def _panel_events(fleet: Fleet, found: DaemonFollower) -> AsyncGenerator[str, None]:
    """One ``snapshot`` event each time the fleet has a new snapshot of the daemon (the page then fetches
    ``status``), and a heartbeat comment while nothing changes; ends when the fleet closes or stops
    following the daemon."""
    yield ": prooflane fleet panel events\nretry: 1000\n\n"
    closed = asyncio.ensure_future(fleet.closing.wait())
    try:
        while fleet.followers.get(found.spec.name) is found:
            changed = asyncio.ensure_future(found.changed())
            done, _ = await asyncio.wait({changed, closed}, timeout=_PANEL_HEARTBEAT_SECS,
                                         return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
            changed.cancel()
            if closed in done:
                return
            if changed not in done:
                yield ": heartbeat\n\n"
            elif found.failures == 0 and found.snapshot is not None:
                yield f"event: snapshot\ndata: {json.dumps({'seq': found.snapshot.get('seq')})}\n\n"
    finally:
        closed.cancel()


# --- running -------------------------------------------------------------------------------------


async def run_fleet(
    config: FleetConfig,
    config_path: Path | None,
    *,
    on_ready: Callable[[str], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Bind, follow the daemons and serve until ``stop`` is set (or SIGINT/SIGTERM), then close in order."""
    import uvicorn

    from ..server.daemon import _install_signal_handlers, _Server, bind

    stop = stop or asyncio.Event()
    sock = bind(config.host, config.port)
    host, port = sock.getsockname()[:2]
    fleet = Fleet(config, config_path)
    app = create_fleet_app(fleet)
    server = _Server(uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False,
                                    timeout_graceful_shutdown=5))  # fmt: skip
    restore = _install_signal_handlers(stop)
    serving = asyncio.create_task(server.serve(sockets=[sock]), name="fleet-http")
    try:
        await fleet.start()
        if on_ready is not None:
            on_ready(f"http://{host}:{port}")
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({stopping, serving}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
    finally:
        fleet.closing.set()
        server.should_exit = True
        await serving
        await fleet.close()
        restore()
