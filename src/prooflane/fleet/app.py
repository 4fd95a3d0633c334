"""The fleet's HTTP side: ``GET /fleet/status``, ``GET /fleet/metrics``, ``GET /healthz``,
``POST /fleet/daemons``, ``DELETE /fleet/daemons/{name}``, ``POST /fleet/daemons/{name}/deploy``, ``/stop``
and ``/restart`` (:mod:`.deploy`), ``GET /fleet/logs`` and ``GET /fleet/daemons/{name}/logs``
(:mod:`.logs`), ``PUT /fleet/circuits/{name}`` (behind the fleet's
token; the last registers an uploaded circuit on every daemon, :mod:`.circuits`), ``GET /fleet/circuits``
(which daemon holds which circuit, by digest), ``GET /`` (the
fleet page) and ``/d/{name}/`` (a daemon's own dashboard, served by the fleet from its cached snapshot, with
its event stream relayed, and its jobs and proofs read through), and ``POST /fleet/daemons/{name}/jobs``
(a job submitted to that daemon with its own token).

Every request goes through the daemon's own checks (:func:`prooflane.server.guard.guard`: Host and Origin,
``HEAD`` as ``GET``, the body limit), on the daemon's HTTP server and its limits
(:func:`prooflane.server.limits.http_server`).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncGenerator, Callable, Coroutine
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import FastAPI, Header, HTTPException, Request, Response
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, PlainTextResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles
from starlette.requests import ClientDisconnect

from .._version import __version__
from ..errors import ConfigError
from ..server.auth import FLEET_SCOPES, Tokens, bound_name
from ..server.docs_page import add_docs_route
from ..server.guard import guard
from ..server.limits import Scope, bind, http_server
from ..server.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from ..server.sse import HEARTBEAT_SECS
from .circuits import UploadRefused, circuit_holdings, register_everywhere, spooled
from .config import DaemonSpec, FleetConfig
from .deploy import (
    DeployError,
    DeployRequest,
    FolderRefused,
    FolderTaken,
    NotDeployed,
    OperationBusy,
    deploy,
    restart,
    stop,
)
from .follower import FETCH_ERRORS, DaemonFollower, describe_failure
from .logs import LogsUnavailable, daemon_logs, fleet_logs
from .service import Fleet, FleetConflict
from .view import daemon_entry

__all__ = ["create_fleet_app", "holds_open", "run_fleet"]

GRACEFUL_SHUTDOWN_SECS = 5.0
"""How long the fleet's server waits for requests in flight when it stops."""
PAGE = Path(__file__).resolve().parent / "page"
DASHBOARD = Path(__file__).resolve().parents[1] / "dashboard"
# Every file of the dashboard the fleet serves: the page's ES modules (all that index.html imports, and
# dom.js and format.js for the fleet page too) and its style sheet.
_DASHBOARD_ASSETS = frozenset({
    "app.js", "charts.js", "dom.js", "events.js", "feed.js", "format.js", "header.js", "history.js",
    "jobs.js", "memory.js", "states.js", "synthesis.js", "trends.js", "workers.js", "style.css",
})  # fmt: skip


def create_fleet_app(fleet: Fleet) -> FastAPI:
    """The fleet's HTTP application."""
    app = FastAPI(title="prooflane fleet", version=__version__, docs_url=None, redoc_url=None)
    app.state.fleet = fleet
    _add_fleet_routes(app, fleet)
    _add_circuit_routes(app, fleet)
    _add_manage_routes(app, fleet)
    _add_panel_routes(app, fleet)
    add_docs_route(app)
    app.mount("/", StaticFiles(directory=PAGE, html=True), name="fleet-page")
    config = fleet.config
    guard(app, allowed_hosts=frozenset(config.allowed_hosts) | bound_name(config.host),
          max_body_bytes=config.max_request_bytes, streamed=_upload)  # fmt: skip
    return app


def _upload(scope: Scope) -> bool:
    """A circuit upload streams through (spooled under ``max_upload_bytes``), unread by the body limit."""
    return scope.get("method") == "PUT" and str(scope.get("path", "")).startswith("/fleet/circuits/")


def holds_open(scope: Scope) -> bool:
    """Whether a request may hold its connection for long: a daemon's event stream relayed for its panel."""
    path = str(scope.get("path", ""))
    return path.startswith("/d/") and path.endswith("/v1/events")


def fleet_tokens(config: FleetConfig) -> Tokens:
    """The fleet's bearer tokens by scope (its ``token`` has every scope)."""
    by_scope = {"view": config.view_tokens, "manage": config.manage_tokens, "deploy": config.deploy_tokens}
    return Tokens.of(FLEET_SCOPES, config.token, by_scope, whose="the fleet's")


def _needs(fleet: Fleet, scope: str, what: str) -> Callable[[str | None], None]:
    """The check of a route that ``what`` describes ("change daemons"): a token of ``scope`` or higher;
    403 while the fleet has no token at all (such routes are never open)."""

    def require(authorization: str | None) -> None:
        tokens = fleet_tokens(fleet.config)
        if not tokens.enabled:
            raise HTTPException(403, f"the fleet config sets no token: set `token` to {what} here")
        tokens.check(authorization, scope)

    return require


def _view(fleet: Fleet, authorization: str | None) -> None:
    """The daemons' logs need a ``view`` token once the fleet lists some (``view_tokens``); else they are
    read as its status is."""
    if fleet.config.view_tokens:
        fleet_tokens(fleet.config).check(authorization, "view")


def _add_fleet_routes(app: FastAPI, fleet: Fleet) -> None:
    require_token = _needs(fleet, "manage", "change daemons")

    @app.get("/fleet/status")
    async def status(snapshots: bool = True) -> JSONResponse:
        """Every daemon's last snapshot, its age and health, and the fleet's totals;
        `?snapshots=false` leaves the snapshots out."""
        return JSONResponse(fleet.status(snapshots=snapshots))

    @app.get("/fleet/metrics", response_class=PlainTextResponse)
    async def metrics() -> PlainTextResponse:
        """Prometheus text: each reachable daemon's metrics labelled `daemon`, and the fleet's gauges."""
        return PlainTextResponse(await fleet.metrics(), media_type=METRICS_CONTENT_TYPE)

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        """200 while the fleet service runs, with how many daemons are reachable."""
        return JSONResponse(fleet.health())

    @app.post("/fleet/daemons", status_code=201)
    async def add(request: Request, authorization: Annotated[str | None, Header()] = None) -> JSONResponse:
        """Add a daemon (a JSON object with the keys of one `[[daemons]]` table but `deploy_dir` and
        `deploy_claim`, which a deploy alone sets: it is followed, never stopped or restarted); saved in the
        config."""
        require_token(authorization)
        try:
            body = await request.json()
        except ValueError:
            raise HTTPException(422, "expected a JSON object with the keys of a [[daemons]] table") from None
        if not isinstance(body, dict):
            raise HTTPException(422, "expected a JSON object with the keys of a [[daemons]] table")
        try:
            spec = DaemonSpec.added(body)
            await fleet.add(spec)
        except ConfigError as exc:
            raise HTTPException(422, str(exc)) from None
        except FleetConflict as exc:
            raise HTTPException(409, str(exc)) from None
        except OSError as exc:
            raise HTTPException(500, f"cannot save the fleet config: {exc}") from None
        return JSONResponse({"name": spec.name, "where": spec.where}, status_code=201)

    @app.get("/fleet/logs")
    async def logs(lines: int = 20, authorization: Annotated[str | None, Header()] = None) -> JSONResponse:
        """Every daemon's last `lines` log lines (its `GET /v1/logs`), asked concurrently; a daemon that
        cannot be read has its `error`. A `view` token once the fleet lists `view_tokens`."""
        _view(fleet, authorization)
        return JSONResponse(await fleet_logs(fleet, lines))

    @app.get("/fleet/daemons/{name}/logs")
    async def one_log(
        name: str, lines: int = 200, authorization: Annotated[str | None, Header()] = None
    ) -> JSONResponse:
        """One daemon's last `lines` log lines; 404 no such daemon, 502 it could not be read (why)."""
        _view(fleet, authorization)
        found = fleet.followers.get(name)
        if found is None:
            raise HTTPException(404, f"no daemon named {name!r} in the fleet")
        try:
            return JSONResponse(await daemon_logs(found, lines))
        except LogsUnavailable as exc:
            raise HTTPException(exc.status, exc.detail) from None

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


def _add_manage_routes(app: FastAPI, fleet: Fleet) -> None:
    """Deploy (a ``deploy`` token), stop and restart (``manage``) daemons on their hosts (:mod:`.deploy`)."""
    require_token = _needs(fleet, "manage", "manage daemons")
    require_deploy = _needs(fleet, "deploy", "manage daemons")

    @app.post("/fleet/daemons/{name}/deploy")
    async def deploy_route(
        name: str, request: Request, authorization: Annotated[str | None, Header()] = None
    ) -> JSONResponse:
        """Install the fleet's prooflane on the host over SSH, start the daemon, wait for its /healthz and
        follow it (deploying a followed daemon again upgrades it). 422 a bad body, 409 an operation on it
        is under way, or the folder is another daemon's or not the SSH user's alone, 502 a step failed
        (`detail` says which, with the host's last lines)."""
        require_deploy(authorization)
        try:
            body = await request.json()
        except ValueError:
            raise HTTPException(422, 'expected a JSON object (docs/fleet.md, "Deploying")') from None
        if not isinstance(body, dict):
            raise HTTPException(422, 'expected a JSON object (docs/fleet.md, "Deploying")')
        before = fleet.followers.get(name)
        if before is not None and not before.spec.deploy_dir:
            raise HTTPException(409, f"a daemon named {name!r} is in the fleet and was not deployed by it: "
                                     "remove it first, or deploy under another name")  # fmt: skip
        try:
            asked = DeployRequest.from_dict(name, body, before.spec if before is not None else None)
            return JSONResponse(await deploy(fleet, asked))
        except ConfigError as exc:
            raise HTTPException(422, str(exc)) from None
        except (OperationBusy, FolderTaken, FolderRefused) as exc:
            raise HTTPException(409, str(exc)) from None
        except DeployError as exc:
            raise HTTPException(502, str(exc)) from None

    @app.post("/fleet/daemons/{name}/stop")
    async def stop_route(name: str, authorization: Annotated[str | None, Header()] = None) -> JSONResponse:
        """Stop a deployed daemon; 200 once no process of it is left and its port is free; 409 when its
        folder does not hold the fleet's claim (nothing is run there)."""
        require_token(authorization)
        return JSONResponse({"name": name, "stopped": await _managed(stop(fleet, name), name)})

    @app.post("/fleet/daemons/{name}/restart")
    async def restart_route(name: str, authorization: Annotated[str | None, Header()] = None) -> JSONResponse:
        """Stop a deployed daemon as stop does, start it again and wait for its /healthz."""
        require_token(authorization)
        return JSONResponse({"name": name, "restarted": await _managed(restart(fleet, name), name)})


async def _managed(operation: Coroutine[Any, Any, str], name: str) -> str:
    try:
        return await operation
    except KeyError:
        raise HTTPException(404, f"no daemon named {name!r} in the fleet") from None
    except (OperationBusy, NotDeployed, FolderRefused) as exc:
        raise HTTPException(409, str(exc)) from None
    except DeployError as exc:
        raise HTTPException(502, str(exc)) from None


_CIRCUIT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def _add_circuit_routes(app: FastAPI, fleet: Fleet) -> None:
    @app.get("/fleet/circuits")
    async def circuits() -> JSONResponse:
        """Each circuit a daemon holds (name and digest) and, per daemon, `holds`, `other` (other files
        under the name), `missing` or `unknown` (the daemon could not be asked: `errors` says why)."""
        return JSONResponse(await circuit_holdings(fleet))

    @app.put("/fleet/circuits/{name}")
    async def register(
        name: str,
        request: Request,
        authorization: Annotated[str | None, Header()] = None,
        daemons: str | None = None,
        digest: str | None = None,
        priority: str | None = None,
    ) -> JSONResponse:
        """Register a circuit on every daemon followed (or `?daemons=a,b`) from one upload: the body a
        daemon's `PUT /v1/circuits/{name}` takes. 200 when every daemon registered it, else 502; each
        daemon's outcome in `daemons`."""
        _needs(fleet, "manage", "register circuits")(authorization)
        if not _CIRCUIT_NAME.fullmatch(name):
            raise HTTPException(422, "name: expected 1-64 characters of A-Z a-z 0-9 . _ - starting with a "
                                     "letter or digit")  # fmt: skip
        kind = request.headers.get("content-type", "")
        if not kind.lower().startswith("multipart/form-data"):
            raise HTTPException(415, "a circuit upload is a multipart/form-data body: parts zkey, then wasm")
        declared = request.headers.get("content-length", "")
        limit = fleet.config.max_upload_bytes
        if declared.isdigit() and int(declared) > limit:
            raise HTTPException(413, f"upload too large: at most {limit:,} bytes (max_upload_bytes)")
        chosen = [d.strip() for d in (daemons or "").split(",") if d.strip()]
        params = {k: v for k, v in (("digest", digest), ("priority", priority)) if v}
        try:
            async with spooled(request.stream(), limit) as body:
                done = await register_everywhere(fleet, name, body, {"content-type": kind}, params, chosen)
        except UploadRefused as exc:
            raise HTTPException(exc.status, exc.detail) from None
        except ClientDisconnect:
            raise HTTPException(400, "the upload was cut short; nothing was sent to any daemon") from None
        return JSONResponse(done, status_code=200 if done["ok"] else 502)


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
        entry = daemon_entry(found.facts(), fleet.clock(), fleet.config.stale_after_secs, time.time())
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

    @app.get("/d/{name}/v1/jobs/{job_id}/proof")
    async def proof(name: str, job_id: str) -> Response:
        """The job's proof as the daemon answers it (never waiting: ``wait`` is the daemon's own)."""
        return await _relay(follower(name), f"/v1/jobs/{quote(job_id, safe='')}/proof", {})

    @app.post("/fleet/daemons/{name}/jobs")
    async def submit(name: str, request: Request, authorization: Annotated[str | None, Header()] = None
                     ) -> Response:  # fmt: skip
        """Submit a job to daemon NAME (a ``manage`` token): the body of its ``POST /v1/jobs``, sent with
        the daemon's own token through the fleet's connection to it (its SSH tunnel); its answer as it is."""
        _needs(fleet, "manage", "submit jobs")(authorization)
        found = follower(name)
        body = await request.body()  # bounded by max_request_bytes (the guard)
        try:
            answer = await found.request("POST", "/v1/jobs", content=body,
                                         headers={"content-type": "application/json"})  # fmt: skip
        except FETCH_ERRORS as exc:
            raise HTTPException(502, f"daemon {name!r}: {describe_failure(exc)}") from None
        kind = answer.headers.get("content-type", "application/json")
        return Response(answer.content, status_code=answer.status_code, media_type=kind)

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
    except FETCH_ERRORS as exc:
        raise HTTPException(502, f"daemon {found.spec.name!r}: {describe_failure(exc)}") from None
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
            done, _ = await asyncio.wait({changed, closed}, timeout=HEARTBEAT_SECS,
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
    """Bind, follow the daemons and serve until ``stop`` is set (or SIGINT/SIGTERM), then close in order.
    The HTTP server is the daemon's, with the fleet config's limits (the keys of the same names)."""
    from ..server.daemon import install_signal_handlers

    stop = stop or asyncio.Event()
    sock = bind(config.host, config.port)
    host, port = sock.getsockname()[:2]
    fleet = Fleet(config, config_path)
    app = create_fleet_app(fleet)
    server = http_server(app, config, holds_open=holds_open, graceful_shutdown_secs=GRACEFUL_SHUTDOWN_SECS)
    restore = install_signal_handlers(stop)
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
