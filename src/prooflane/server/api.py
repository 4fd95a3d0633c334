"""The daemon's HTTP API: jobs, proof kinds, circuits, status, events (SSE), metrics, health, dashboard.

`create_app(engine, config)` builds the FastAPI application. It talks to the engine only through the
public methods listed in `EngineApi`; it owns no proving state. Every 4xx answer carries a ``detail`` a
person can act on.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Protocol
from urllib.parse import quote, urlencode

from fastapi import Depends, FastAPI, Header, HTTPException, Query, Request, Security
from fastapi import Path as PathParam
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles

from .._version import __version__
from ..config import Config
from ..engine.engine import MAX_JOBS_PAGE
from ..logs import MAX_TAIL_LINES, tail
from ..models import (
    JOB_ID_SCHEMA,
    CircuitInfo,
    CircuitRegistration,
    JobAccepted,
    JobProof,
    JobRequest,
    JobState,
    JobView,
    KindInfo,
)
from ..status.feed import Subscription
from ..status.snapshot import Health
from ..status.tracker import TrackerTotals
from . import metrics
from .auth import DAEMON_SCOPES, Tokens, bound_name
from .docs_page import add_docs_route
from .errors import ErrorBody, install_error_handlers
from .guard import guard
from .limits import ENDING, asks_to_wait
from .sse import HEARTBEAT_SECS, event_stream, parse_event_id
from .status_answer import DEFAULT_ENDED, DEFAULT_NEXT, MAX_LISTED, StatusAnswers, TaggedSnapshot
from .upload import UploadEngine, add_upload_routes, streamed, upload_refusal

__all__ = ["ApiSettings", "EngineApi", "close_streams", "create_app", "holds_open"]

DASHBOARD = Path(__file__).resolve().parents[1] / "dashboard"
"""The dashboard's static files (served at ``/``; the fleet serves them too)."""
JOB_STATES = tuple(state.value for state in JobState)
MAX_WAIT_SECS = 300.0
"""The longest long-poll (``GET /v1/jobs/{id}/proof?wait=``), as /openapi.json gives it."""
_STATES = {"enum": list(JOB_STATES)}  # in /openapi.json; another state is 400, naming the states

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]


class EngineApi(UploadEngine, Protocol):
    """The engine methods the API uses (the real `prooflane.engine.Engine` has them all)."""

    @property
    def ready(self) -> bool: ...

    def snapshot(self) -> TaggedSnapshot: ...

    def totals(self) -> TrackerTotals: ...

    @property
    def boot_id(self) -> str: ...

    @property
    def seq(self) -> int: ...

    def subscribe(self, last_event_id: int | None = None) -> Subscription: ...

    def health(self) -> Health: ...

    async def submit(self, req: JobRequest) -> str: ...

    def job(self, job_id: str) -> JobView | None: ...

    def jobs(
        self, state: str | None = None, limit: int = 100, before: str | None = None
    ) -> list[JobView]: ...

    async def wait_proof(self, job_id: str, timeout: float) -> JobProof | None: ...  # noqa: ASYNC109

    async def cancel(self, job_id: str) -> bool: ...

    def kinds(self) -> list[KindInfo]: ...

    def verification_key(self, kind: str, circuit: str | None = None) -> dict[str, Any]: ...

    async def register_circuit(
        self, name: str, zkey_path: Path, *, wasm_path: Path | None = None, priority: str = "normal"
    ) -> CircuitInfo: ...

    def circuits(self) -> list[CircuitInfo]: ...


@dataclass(frozen=True)
class ApiSettings:
    """What the HTTP layer needs from the config: auth, limits, and the SSE cadence."""

    tokens: Tokens = field(default_factory=lambda: Tokens(DAEMON_SCOPES))  # none: every route open
    max_body_bytes: int = 1 << 20
    max_wait_secs: float = MAX_WAIT_SECS
    heartbeat_secs: float = HEARTBEAT_SECS
    allowed_hosts: frozenset[str] = frozenset()  # Host names besides IPs, localhost and the machine's own
    max_upload_bytes: int = 4 << 30  # config.max_circuit_bytes
    upload_refusal: str | None = None  # why uploads are refused (beyond loopback without a token)
    log_file: Path | None = None  # the daemon's log file, read back by GET /v1/logs

    @classmethod
    def from_config(cls, config: Config) -> ApiSettings:
        """Take the tokens and the limits from the daemon config (no token at all means no auth)."""
        tokens = Tokens.of(DAEMON_SCOPES, config.token, {
            "read": config.read_tokens, "submit": config.submit_tokens, "admin": config.admin_tokens,
        })  # fmt: skip
        return cls(
            tokens=tokens,
            max_body_bytes=config.max_request_bytes,
            allowed_hosts=frozenset(config.allowed_hosts) | bound_name(config.host),
            max_upload_bytes=config.max_circuit_bytes,
            upload_refusal=upload_refusal(config.host, tokens.enabled),
            log_file=config.log_file,
        )


def create_app(engine: EngineApi, config: Config, *, settings: ApiSettings | None = None) -> FastAPI:
    """Build the HTTP application around a (started or starting) engine."""
    settings = settings or ApiSettings.from_config(config)
    app = FastAPI(
        title="prooflane",
        version=__version__,
        summary="A pipelined Groth16 proving engine",
        docs_url=None,  # /docs is docs_page's: Swagger UI would load its scripts from a CDN
        redoc_url=None,
        responses={"4XX": {"model": ErrorBody, "description": "Refused: `detail` says why."}},
    )
    app.state.engine = engine
    app.state.settings = settings
    app.state.closing = asyncio.Event()
    install_error_handlers(app)
    _add_job_routes(app, engine, settings)
    _add_kind_routes(app, engine, settings)
    add_upload_routes(
        app, engine, functools.partial(_require, settings), settings.max_upload_bytes, settings.upload_refusal
    )
    _add_status_routes(app, engine, settings)
    add_docs_route(app)
    if DASHBOARD.is_dir():
        app.mount("/", StaticFiles(directory=DASHBOARD, html=True), name="dashboard")
    guard(
        app, allowed_hosts=settings.allowed_hosts, max_body_bytes=settings.max_body_bytes, streamed=streamed
    )
    return app


def holds_open(scope: Scope) -> bool:
    """Whether a request may hold its connection for long: the event stream, and a long-poll for a proof
    (``?wait=`` over 0). The server counts these against its budget of streams (docs/config.md,
    ``max_streams``)."""
    path = str(scope.get("path", ""))
    if path == "/v1/events":
        return True
    return path.startswith("/v1/jobs/") and path.endswith("/proof") and asks_to_wait(scope)


def close_streams(app: FastAPI) -> None:
    """Ask every open event stream to finish (the server calls this when it shuts down)."""
    closing: asyncio.Event = app.state.closing
    closing.set()


# --- auth and errors ---------------------------------------------------------------------------


# In /openapi.json the mutating routes say they need a bearer token exactly when one is configured.
_BEARER = HTTPBearer(auto_error=False, description="The daemon's `token`: `Authorization: Bearer <token>`.")


def _require(settings: ApiSettings, scope: str) -> Callable[..., None]:
    """The dependency of a route that needs a token of ``scope`` (open when the daemon has no token)."""
    if not settings.tokens.enabled:

        def open_route() -> None:
            return None

        return open_route

    def check(
        request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_BEARER)]
    ) -> None:
        # ``credentials`` puts the scheme in /openapi.json; the header is read here, to say what is wrong.
        settings.tokens.check(request.headers.get("authorization"), scope)

    return check


JobId = Annotated[str, PathParam(description="The job's id.", json_schema_extra=JOB_ID_SCHEMA)]
"""A job id in a route's path (any other string is simply no job: 404)."""


MAX_PARTITIONS_PAGE = 1024
"""The most partitions one ``GET /v1/jobs/{id}`` lists (``partitions_limit``; the default)."""


def _not_found_job(job_id: str) -> HTTPException:
    return HTTPException(404, f"no job with id {job_id!r}")


# --- jobs --------------------------------------------------------------------------------------


def _add_job_routes(app: FastAPI, engine: EngineApi, settings: ApiSettings) -> None:
    auth = [Depends(_require(settings, "submit"))]  # submit and cancel

    @app.post("/v1/jobs", status_code=202, dependencies=auth, response_model=JobAccepted, tags=["jobs"])
    async def submit(request: JobRequest) -> JobAccepted:
        """Accept a proof job; a repeated `job_id` answers the same job again (idempotent)."""
        if not engine.ready:
            raise HTTPException(503, "the daemon is starting and does not accept jobs yet; retry shortly")
        return JobAccepted(job_id=await engine.submit(request))

    @app.get("/v1/jobs", response_model=list[JobView], tags=["jobs"])
    async def jobs(
        response: Response,
        state: Annotated[
            str | None, Query(description="only jobs in this state", json_schema_extra=_STATES)
        ] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_JOBS_PAGE)] = 100,
        before: Annotated[
            str | None,
            Query(description="the next page: the jobs journalled before this one (the last read)"),
        ] = None,
    ) -> list[JobView]:
        """Jobs from the journal, newest first, finished ones included, a page at a time: a full page says
        where the next one starts (`Link: <...&before=ID>; rel="next"`)."""
        if state is not None and state not in JOB_STATES:
            raise HTTPException(400, f"unknown state {state!r}: expected one of {', '.join(JOB_STATES)}")
        page = engine.jobs(state, limit, before)
        if len(page) == limit:
            query = urlencode({k: v for k, v in (("state", state), ("limit", limit)) if v is not None})
            response.headers["Link"] = f'</v1/jobs?{query}&before={quote(page[-1].job_id)}>; rel="next"'
        return page

    @app.get("/v1/jobs/{job_id}", response_model=JobView, tags=["jobs"])
    async def job(
        job_id: JobId,
        response: Response,
        partitions_from: Annotated[int, Query(ge=0, description="The first partition listed.")] = 0,
        partitions_limit: Annotated[
            int, Query(ge=1, le=MAX_PARTITIONS_PAGE, description="At most this many partitions listed.")
        ] = MAX_PARTITIONS_PAGE,
    ) -> JobView:
        """One job: its state and the state of each partition, a page of them (`total_partitions` says how
        many; a page that is not the last says where the next starts: `Link: <...>; rel="next"`)."""
        view = engine.job(job_id)
        if view is None:
            raise _not_found_job(job_id)
        end = partitions_from + partitions_limit
        if partitions_from == 0 and end >= len(view.partitions):
            return view
        if end < len(view.partitions):
            query = urlencode({"partitions_from": end, "partitions_limit": partitions_limit})
            response.headers["Link"] = f'</v1/jobs/{quote(job_id)}?{query}>; rel="next"'
        return view.model_copy(update={"partitions": view.partitions[partitions_from:end]})

    @app.get(
        "/v1/jobs/{job_id}/proof",
        response_model=JobProof,
        tags=["jobs"],
        responses={
            202: {"model": JobView, "description": "Not done yet: the job's state; ask again."},
            409: {"description": "The job failed or was cancelled: no proof (the detail says why)."},
        },
    )
    async def proof(
        request: Request,
        job_id: JobId,
        wait: Annotated[
            float,
            Query(
                ge=0,
                description="seconds to wait for the proof (long-poll)",
                json_schema_extra={"maximum": MAX_WAIT_SECS},  # more is 400, saying the limit
            ),
        ] = 0.0,
    ) -> Response:
        """The job's proofs once done; `?wait=S` holds the request up to S seconds for it."""
        if wait > settings.max_wait_secs:
            raise HTTPException(400, f"wait={wait:g} is too long: at most {settings.max_wait_secs:g} seconds")
        # Waiting ends early when the daemon shuts down, or when the server ends it to make room (ENDING).
        ending = [app.state.closing, *([request.scope[ENDING]] if ENDING in request.scope else [])]
        return await _proof_or_state(engine, job_id, wait, ending)

    @app.delete("/v1/jobs/{job_id}", response_model=JobView, dependencies=auth, tags=["jobs"])
    async def cancel(job_id: JobId) -> JobView:
        """Cancel a job at whatever stage it is; its memory and workers are freed."""
        if engine.job(job_id) is None:
            raise _not_found_job(job_id)
        cancelled = await engine.cancel(job_id)
        view = engine.job(job_id)
        assert view is not None
        if not cancelled and view.state != "cancelled":
            raise HTTPException(409, f"job {job_id} already finished ({view.state}); nothing to cancel")
        return view


async def _proof_or_state(
    engine: EngineApi, job_id: str, wait: float, ending: list[asyncio.Event]
) -> Response:
    if engine.job(job_id) is None:
        raise _not_found_job(job_id)
    found = await _wait_unless_ending(engine.wait_proof(job_id, wait), ending)
    if found is not None:
        return JSONResponse(found.model_dump(mode="json"))
    view = engine.job(job_id)
    assert view is not None
    if view.state.terminal and view.state is not JobState.DONE:
        reason = f": {view.error}" if view.error else ""
        raise HTTPException(409, f"job {job_id} is {view.state} and has no proof{reason}")
    # Not done yet: 202 with the job's state, so a client can poll again.
    return JSONResponse(view.model_dump(mode="json"), status_code=202, headers={"Retry-After": "1"})


async def _wait_unless_ending(
    waiting: Awaitable[JobProof | None], ending: list[asyncio.Event]
) -> JobProof | None:
    """The long-poll's result, or None at once when one of ``ending`` is set (the caller answers 202)."""
    proof = asyncio.ensure_future(waiting)
    ended = [asyncio.ensure_future(event.wait()) for event in ending]
    try:
        await asyncio.wait({proof, *ended}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for one in ended:
            one.cancel()
        if not proof.done():
            proof.cancel()
    return proof.result() if proof.done() and not proof.cancelled() else None


# --- kinds and circuits ------------------------------------------------------------------------


def _add_kind_routes(app: FastAPI, engine: EngineApi, settings: ApiSettings) -> None:
    auth = [Depends(_require(settings, "admin"))]  # register circuits

    @app.get("/v1/kinds", response_model=list[KindInfo], tags=["kinds"])
    async def kinds() -> list[KindInfo]:
        """Every proof kind this daemon proves, with its partitions, priority, curve and sizes."""
        return engine.kinds()

    @app.get("/v1/kinds/{kind}/verification_key", tags=["kinds"])
    async def verification_key(
        kind: str, circuit: Annotated[str | None, Query(description="for kind circom: the circuit")] = None
    ) -> dict[str, Any]:
        """The kind's verification key in snarkjs `verification_key.json` form."""
        if kind == "circom" and circuit is None:
            raise HTTPException(400, "kind 'circom' has one key per circuit: add ?circuit=NAME")
        return engine.verification_key(kind, circuit)

    @app.get("/v1/circuits", response_model=list[CircuitInfo], tags=["kinds"])
    async def circuits() -> list[CircuitInfo]:
        """The registered circom circuits."""
        return engine.circuits()

    @app.post("/v1/circuits", status_code=201, response_model=CircuitInfo, dependencies=auth, tags=["kinds"])
    async def register_circuit(request: CircuitRegistration) -> CircuitInfo:
        """Register a circom circuit: a snarkjs .zkey and, optionally, circom's witness generator (.wasm),
        both paths on the daemon's machine. Jobs of kind `circom` then name it in `circuit`."""
        wasm = Path(request.wasm) if request.wasm is not None else None
        return await engine.register_circuit(
            request.name, Path(request.zkey), wasm_path=wasm, priority=request.priority.value
        )


# --- status, events, metrics, health -----------------------------------------------------------


def _add_status_routes(app: FastAPI, engine: EngineApi, settings: ApiSettings) -> None:
    answers = app.state.status_answers = StatusAnswers(engine.snapshot)

    @app.get("/status", tags=["status"], response_class=JSONResponse)
    async def status(
        request: Request,
        waiting: Annotated[
            int,
            Query(
                alias="next",
                ge=0,
                le=MAX_LISTED,
                description="list this many of the jobs that wait (queued, or running with nothing held now) "
                "whole, the next to run",
            ),
        ] = DEFAULT_NEXT,
        ended: Annotated[
            int,
            Query(ge=0, le=MAX_LISTED, description="list this many ended jobs whole, the last to end"),
        ] = DEFAULT_ENDED,
        jobs: Annotated[
            int | None,
            Query(ge=0, le=MAX_LISTED, description="both `next` and `ended` at once"),
        ] = None,
    ) -> Response:
        """A frozen snapshot of everything the engine is doing (the shape other tools parse): every worker,
        every job holding work now whole, the next to run and the last ended, every job counted in
        `live_jobs`.
        `ETag` / `If-None-Match`: 304 while only the clock moved; gzipped for a client that takes it."""
        if jobs is not None:
            waiting = ended = jobs
        return answers.answer(request, waiting, ended)

    @app.get("/v1/events", tags=["status"], response_class=StreamingResponse)
    async def events(
        request: Request,
        last_event_id: Annotated[str | None, Header()] = None,
        after: Annotated[str | None, Query(description="resume after this event id")] = None,
    ) -> StreamingResponse:
        """Server-sent events, one per tracker event; resume with `Last-Event-ID` without a gap."""
        given = last_event_id if last_event_id is not None else after
        parse_event_id(given, engine.boot_id)  # a malformed id is 400 now, not a broken stream
        stream = event_stream(engine, given, settings.heartbeat_secs, app.state.closing)
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return StreamingResponse(stream, media_type="text/event-stream", headers=headers)

    @app.get("/metrics", response_class=PlainTextResponse, tags=["status"])
    async def prometheus() -> PlainTextResponse:
        """Prometheus text exposition."""
        return PlainTextResponse(metrics.render_totals(engine.totals()), media_type=metrics.CONTENT_TYPE)

    @app.get("/v1/logs", tags=["status"], dependencies=[Depends(_require(settings, "read"))])
    async def logs(
        lines: Annotated[int, Query(ge=1, le=MAX_TAIL_LINES, description="how many of the last lines")] = 200,
    ) -> JSONResponse:
        """The last lines of the daemon's log file (`data_dir/prooflane.log`, rotated), oldest first.
        Needs the bearer token when one is configured: a log names jobs, files and failures."""
        if settings.log_file is None:
            raise HTTPException(404, "this daemon writes no log file (log_file_bytes = 0 in its config)")
        found = await asyncio.to_thread(tail, settings.log_file, lines)
        return JSONResponse({"file": str(settings.log_file), "lines": found})

    @app.get("/healthz", tags=["status"])
    async def healthz() -> JSONResponse:
        """200 only when the daemon can do its work: running, every device with a live worker, the queue not
        stalled. 503 otherwise, with the reasons (for systemd and container health checks). Either way
        ``warnings``: what does not stop the work but should be known (a curve proved on the libraries)."""
        health = engine.health()
        warnings = list(health.warnings)
        if health.ok:
            return JSONResponse({"ok": True, "version": __version__, "warnings": warnings})
        detail = "; ".join(health.reasons)
        body = {"ok": False, "detail": detail, "reasons": list(health.reasons), "warnings": warnings}
        return JSONResponse(body, status_code=503)
