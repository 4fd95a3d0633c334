"""Uploads: a circuit's files, or a job's witnesses, sent in the request body and streamed to the engine.

- ``PUT /v1/circuits/{name}?digest=&priority=``: a ``multipart/form-data`` body with a part ``zkey`` and
  optionally then a part ``wasm`` (``curl -F zkey=@c.zkey -F wasm=@c.wasm``); 201 with the circuit.
- ``POST /v1/circuits/{name}/jobs?job_id=&priority=``: a ``multipart/form-data`` body with one part ``wtns``
  per partition, in order; 202 with the job id.

The body is parsed as it arrives (:class:`MultipartReader`, on python-multipart's parser) and each part's
bytes go to the engine a chunk at a time, which writes them into its data folder: nothing holds a whole
file in memory. These routes pass
``BodyLimit`` (:func:`streamed`) and have their own limit, ``max_circuit_bytes`` (413, from the declared
length before anything is read, or once the body grows past it). A daemon that listens beyond loopback
without a token refuses uploads (403, saying why): anyone who reached it could fill its disk.
"""

from __future__ import annotations

import collections
import contextlib
import ipaddress
import logging
import re
from collections.abc import AsyncGenerator, AsyncIterator, Callable, MutableMapping
from typing import Annotated, Any, Protocol

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi import Path as PathParam
from starlette.requests import ClientDisconnect

from ..errors import Invalid, TooLarge
from ..models import JOB_ID_SCHEMA, CircuitInfo, JobAccepted, Priority

__all__ = ["MultipartReader", "UploadEngine", "add_upload_routes", "streamed", "upload_refusal"]

Scope = MutableMapping[str, Any]
Parts = AsyncIterator[tuple[str, AsyncIterator[bytes]]]  # the engine's UploadParts

_UPLOADS = (("PUT", re.compile(r"/v1/circuits/[^/]+")), ("POST", re.compile(r"/v1/circuits/[^/]+/jobs")))
MAX_BOUNDARY_BYTES = 70
"""The longest boundary (RFC 2046)."""
MAX_PART_HEADERS = 8
"""The most headers in the head of one part of a multipart body."""
MAX_PART_HEADER_BYTES = 4096
"""The longest header line (without its CRLF) in the head of one part of a multipart body."""
_NAME = re.compile(r"""(?:^|;)\s*name\s*=\s*(?:"([^"]*)"|([^;\s]+))""", re.IGNORECASE)
_DIGEST = "^[0-9a-fA-F]{64}$"
# The parser logs each body it refuses; the client is answered why (422), and a client must not be able to
# fill the daemon's log.
logging.getLogger("python_multipart").setLevel(logging.ERROR)
_CUT = "the upload was cut short (the body ended before its last part did); nothing kept"


class UploadEngine(Protocol):
    """The engine methods the upload routes use."""

    @property
    def ready(self) -> bool: ...

    async def register_upload(
        self,
        name: str,
        parts: AsyncIterator[tuple[str, AsyncIterator[bytes]]],
        *,
        digest: str | None = None,
        priority: str = "normal",
    ) -> CircuitInfo: ...

    async def submit_upload(
        self,
        circuit: str,
        parts: AsyncIterator[tuple[str, AsyncIterator[bytes]]],
        *,
        job_id: str | None = None,
        priority: str | None = None,
    ) -> str: ...


def streamed(scope: Scope) -> bool:
    """Whether a request is an upload: its body streams past ``BodyLimit`` to the route, which limits it."""
    method, path = scope.get("method"), scope.get("path", "")
    return any(method == m and pattern.fullmatch(path) for m, pattern in _UPLOADS)


def upload_refusal(host: str, tokens: bool) -> str | None:
    """Why this daemon refuses uploads (None: it takes them): it listens beyond loopback without a token
    (``tokens``: whether it has any)."""
    if tokens:
        return None
    try:
        loopback = ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if loopback:
        return None
    return (
        f"uploads are refused: this daemon listens on {host or 'every address'!r} without a token, so "
        "anyone who reaches it could fill its disk; set `token` in its config (or listen on 127.0.0.1)"
    )


class MultipartReader:
    """A ``multipart/form-data`` body read as it arrives: :meth:`parts` yields each part's field name and
    its bytes, a chunk at a time (held: one received chunk).

    The parsing is python-multipart's (the parser FastAPI's own forms use; RFC 7578 and RFC 2046: a
    delimiter is a line of the boundary followed by ``--`` or the end of the line, anything else is data),
    with at most ``MAX_PART_HEADERS`` headers of at most ``MAX_PART_HEADER_BYTES`` each in a part's head;
    this class turns its callbacks into the stream of parts the engine reads. A body the parser refuses,
    or one that ends before its closing delimiter, is ``Invalid`` (422) saying why.
    """

    def __init__(self, chunks: AsyncIterator[bytes], boundary: str) -> None:
        from python_multipart.multipart import MultipartParser

        self._chunks = chunks
        self._events: collections.deque[tuple[str, bytes]] = collections.deque()
        self._ended = False
        self._field, self._value = bytearray(), bytearray()
        self._disposition: str | None = None
        callbacks = {
            "on_part_begin": self._part_begins,
            "on_header_field": lambda data, start, end: self._field.extend(data[start:end]),
            "on_header_value": lambda data, start, end: self._value.extend(data[start:end]),
            "on_header_end": self._header_ends,
            "on_headers_finished": self._headers_end,
            "on_part_data": lambda data, start, end: self._events.append(("data", bytes(data[start:end]))),
            "on_part_end": lambda: self._events.append(("end", b"")),
            "on_end": self._body_ends,
        }
        self._parser = MultipartParser(
            boundary.encode("latin-1"), callbacks,  # type: ignore[arg-type]
            max_header_count=MAX_PART_HEADERS, max_header_size=MAX_PART_HEADER_BYTES,
        )  # fmt: skip

    async def parts(self) -> AsyncGenerator[tuple[str, AsyncIterator[bytes]], None]:
        """Each part in order: (its field name, its bytes); the closing delimiter ends them."""
        while (event := await self._next()) is not None:
            kind, value = event
            if kind != "part":  # the parser reports data only inside a part
                continue
            data = self._data()
            yield value.decode("latin-1"), data
            async for _ in data:  # what the consumer left of this part
                pass

    async def _data(self) -> AsyncIterator[bytes]:
        """The current part's bytes, up to its end."""
        while (event := await self._next()) is not None:
            kind, value = event
            if kind == "end":
                return
            if value:
                yield value
        raise Invalid(_CUT)

    async def _next(self) -> tuple[str, bytes] | None:
        """The parser's next event, feeding it the body as needed; None once the body's last part ended."""
        from python_multipart.exceptions import MultipartParseError

        while not self._events:
            if self._ended:
                return None
            try:
                chunk = await anext(self._chunks)
            except StopAsyncIteration:
                raise Invalid(_CUT) from None
            try:
                self._parser.write(chunk)
            except MultipartParseError as exc:
                raise Invalid(f"not a multipart/form-data body as its boundary says: {exc}") from None
        return self._events.popleft()

    def _part_begins(self) -> None:
        self._disposition = None

    def _header_ends(self) -> None:
        if bytes(self._field).strip().lower() == b"content-disposition":
            self._disposition = self._value.decode("latin-1")
        self._field.clear()
        self._value.clear()

    def _headers_end(self) -> None:
        found = _NAME.search(self._disposition or "")
        if found is None:
            raise Invalid("a part of the upload has no Content-Disposition naming its field (name=...)")
        name = found.group(1) if found.group(1) is not None else found.group(2)
        self._events.append(("part", name.encode("latin-1")))

    def _body_ends(self) -> None:
        self._ended = True


async def _limited(request: Request, max_bytes: int) -> AsyncIterator[bytes]:
    """The request's body as it arrives, at most ``max_bytes`` (``TooLarge`` past it)."""
    received = 0
    try:
        async for chunk in request.stream():
            received += len(chunk)
            if received > max_bytes:
                raise TooLarge(_too_large(max_bytes))
            if chunk:
                yield chunk
    except ClientDisconnect:
        raise Invalid(_CUT) from None


def _too_large(max_bytes: int) -> str:
    return f"upload too large: at most {max_bytes:,} bytes (max_circuit_bytes) are accepted; nothing kept"


def _reader(request: Request, max_bytes: int, refusal: str | None) -> MultipartReader:
    """The upload's body, once the request may send one: refused before anything is read otherwise."""
    if refusal is not None:
        raise HTTPException(403, refusal)
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise TooLarge(_too_large(max_bytes))
    from python_multipart.multipart import parse_options_header

    kind, params = parse_options_header(request.headers.get("content-type", ""))
    boundary = params.get(b"boundary", b"")  # parameter names in any case (RFC 9110)
    if kind.lower() != b"multipart/form-data" or not boundary or len(boundary) > MAX_BOUNDARY_BYTES:
        raise HTTPException(
            415,
            "an upload is a multipart/form-data body (curl -F zkey=@FILE ...), with its boundary "
            f"(1-{MAX_BOUNDARY_BYTES} characters)",
        )
    return MultipartReader(_limited(request, max_bytes), boundary.decode("latin-1"))


def _multipart(required: str, fields: dict[str, str]) -> dict[str, Any]:
    """The request body of an upload route in /openapi.json."""
    properties = {n: {"type": "string", "format": "binary", "description": d} for n, d in fields.items()}
    schema = {"type": "object", "required": [required], "properties": properties}
    return {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": schema}}}}


CircuitName = Annotated[
    str, PathParam(description="The circuit's name.", pattern=str(JOB_ID_SCHEMA["pattern"]))
]
"""A circuit's name in a route's path (1-64 of A-Z a-z 0-9 . _ -, a letter or digit first)."""
_JOB_ID = Query(
    description="Client-chosen job id; resubmitting it is idempotent.", pattern=str(JOB_ID_SCHEMA["pattern"])
)


def add_upload_routes(
    app: FastAPI,
    engine: UploadEngine,
    auth: Callable[[str], Callable[..., None]],
    max_bytes: int,
    refusal: str | None,
) -> None:
    """``PUT /v1/circuits/{name}`` (an ``admin`` token) and ``POST /v1/circuits/{name}/jobs`` (``submit``),
    see the module's docstring; ``auth(scope)`` is the dependency that checks a token of the scope."""

    def ready() -> None:
        if not engine.ready:
            raise HTTPException(503, "the daemon is starting and does not accept uploads yet; retry shortly")

    register = [Depends(auth("admin")), Depends(ready)]
    submit = [Depends(auth("submit")), Depends(ready)]

    @app.put(
        "/v1/circuits/{name}", status_code=201, response_model=CircuitInfo, dependencies=register,
        tags=["kinds"], openapi_extra=_multipart(
            "zkey", {"zkey": "The snarkjs Groth16 .zkey.", "wasm": "circom's witness generator (after zkey)."}
        ),
    )  # fmt: skip
    async def upload_circuit(
        request: Request,
        name: CircuitName,
        digest: Annotated[
            str | None,
            Query(description="SHA-256 (hex) of the .zkey then the .wasm (or '-'); checked", pattern=_DIGEST),
        ] = None,
        priority: Priority = Priority.NORMAL,
    ) -> CircuitInfo:
        """Register a circom circuit from files sent in the body (multipart: `zkey`, then optionally
        `wasm`), streamed to the data folder and checked as a path registration is; the same name and
        digest again are the circuit registered, other files under a taken name 409."""
        reader = _reader(request, max_bytes, refusal)
        async with contextlib.aclosing(reader.parts()) as parts:
            return await engine.register_upload(name, parts, digest=digest, priority=priority.value)

    @app.post(
        "/v1/circuits/{name}/jobs", status_code=202, response_model=JobAccepted, dependencies=submit,
        tags=["jobs"], openapi_extra=_multipart("wtns", {"wtns": "A .wtns witness: one part per partition."}),
    )  # fmt: skip
    async def upload_job(
        request: Request,
        name: CircuitName,
        job_id: Annotated[str | None, _JOB_ID] = None,
        priority: Priority | None = None,
    ) -> JobAccepted:
        """A job on the registered circuit whose `.wtns` witnesses are sent in the body (multipart: one part
        `wtns` per partition, in order), checked as named files are."""
        reader = _reader(request, max_bytes, refusal)
        prio = priority.value if priority is not None else None
        async with contextlib.aclosing(reader.parts()) as parts:
            return JobAccepted(job_id=await engine.submit_upload(name, parts, job_id=job_id, priority=prio))
