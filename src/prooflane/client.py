"""`prooflane.Client`: the daemon's HTTP API from Python.

    with Client() as client:  # the default URL: a daemon on this machine
        job_id = client.submit("porep-c2", sector="s1")  # <data_dir>/sectors/s1 on the daemon's machine
        proof = client.proof(job_id, wait=600)

Files on this machine travel in the request (:meth:`Client.upload_circuit`, :meth:`Client.submit_witnesses`),
streamed from disk a chunk at a time, for a daemon anywhere; :meth:`Client.register_circuit` and ``submit``'s
``witnesses`` name paths on the daemon's own machine instead.

A daemon answer with an error status raises `DaemonError` (its ``status`` and the daemon's ``detail``);
a daemon that cannot be reached raises `DaemonUnreachable`. The URL may also be given as ``host:port``,
``:port`` (this machine) or ``host`` (the default port): :func:`normalize_url`.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from .config import DEFAULT_HOST, DEFAULT_PORT, DEFAULT_URL
from .errors import DaemonError, DaemonUnreachable
from .models import CircuitInfo, CircuitRegistration, InlineSector, JobProof, JobRequest, JobView, KindInfo

__all__ = [
    "DEFAULT_URL",
    "Client",
    "Progress",
    "ServerEvent",
    "circuit_digest",
    "job_request",
    "multipart_upload",
    "normalize_url",
]

_LONG_POLL_SLICE = 60.0  # one long-poll request waits at most this long; longer waits take several
_UPLOAD_CHUNK = 1 << 20  # what one read of an uploaded file takes
_UPLOAD_ANSWER_SECS = 180.0  # beyond the timeout: the daemon checks an upload before it answers

Progress = Callable[[int, int], None]
"""Called as an upload goes: (bytes sent, bytes in all)."""
_URL_FORMS = "expected http://HOST:PORT, https://HOST:PORT, HOST:PORT, HOST or :PORT"


def normalize_url(url: str) -> str:
    """A daemon's base URL as given by a person: ``http(s)://host[:port][/prefix]``, or ``host:port``,
    ``:port`` (127.0.0.1) or ``host`` (the default port), each made ``http://...``;
    without a trailing slash. Raises ValueError saying what is accepted."""
    text = url.strip()
    if "://" not in text:
        if text.startswith(":"):
            text = DEFAULT_HOST + text
        text = f"http://{text}"
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"{url!r}: {exc}; {_URL_FORMS}") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{url!r}: the scheme {parts.scheme!r} is not http or https; {_URL_FORMS}")
    if not parts.hostname:
        raise ValueError(f"{url!r}: no host; {_URL_FORMS}")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError(f"{url!r}: expected no user, query or fragment; {_URL_FORMS}")
    if port is None and "://" not in url:
        text = f"{parts.scheme}://{parts.netloc}:{DEFAULT_PORT}{parts.path}"
    return text.rstrip("/")


@dataclass(frozen=True)
class ServerEvent:
    """One server-sent event: its number in its boot of the daemon (``id``: the ``seq`` a snapshot gives),
    that boot, its name, and its JSON data. Resume after it with ``events(last_event_id=event.resume_id)``."""

    id: int | None
    name: str
    data: Any
    boot_id: str | None = None

    @property
    def resume_id(self) -> str | None:
        """The id to resume after this event: ``<boot_id>:<id>`` (another boot's is never resumed from)."""
        if self.id is None:
            return None
        return f"{self.boot_id}:{self.id}" if self.boot_id else str(self.id)


class Client:
    """A synchronous client of one prooflane daemon."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        http: httpx.Client | None = None,
    ) -> None:
        self.url = normalize_url(url)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._timeout = timeout
        self._http = http or httpx.Client(base_url=self.url, timeout=timeout)
        self._http.headers.update(headers)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    # --- jobs ---------------------------------------------------------------------------------

    def submit(
        self,
        kind: str,
        *,
        sector: str | Path | InlineSector | None = None,
        randomness: str | None = None,
        priority: str | None = None,
        job_id: str | None = None,
        circuit: str | None = None,
        witnesses: list[str | dict[str, Any]] | None = None,
    ) -> str:
        """Submit a job and return its id (a repeated ``job_id`` returns the same job).

        ``sector``: a text is sent as written, for the daemon to read on its machine: a name (``"s1"``, any
        relative path) is a sector of the daemon's sector folder (``<data_dir>/sectors/s1``), an absolute
        path a folder inside its allowed folders. A ``Path`` is a folder on this machine, sent absolute
        (for a daemon here). An `InlineSector` has the daemon make the sector.
        """
        body = job_request(kind, sector=sector, randomness=randomness, priority=priority, job_id=job_id,
                           circuit=circuit, witnesses=witnesses)  # fmt: skip
        answer = self._call("POST", "/v1/jobs", json=body)
        job: str = answer["job_id"]
        return job

    def job(self, job_id: str) -> JobView:
        """The job's state and its partitions' states."""
        return JobView.model_validate(self._call("GET", f"/v1/jobs/{job_id}"))

    def jobs(self, state: str | None = None, limit: int = 100, before: str | None = None) -> list[JobView]:
        """Jobs from the daemon's journal, newest first (finished ones included): a page of at most
        ``limit`` (1,000 at the most), of the jobs journalled before job ``before`` when given."""
        params: dict[str, Any] = {"limit": limit} | ({"state": state} if state else {})
        params |= {"before": before} if before else {}
        return [JobView.model_validate(item) for item in self._call("GET", "/v1/jobs", params=params)]

    def proof(self, job_id: str, wait: float = 0.0) -> JobProof | None:
        """The job's proof, waiting up to ``wait`` seconds for it; None when not done by then.

        A failed or cancelled job raises `DaemonError` (409) with the reason.
        """
        deadline = time.monotonic() + wait
        while True:
            left = max(0.0, deadline - time.monotonic())
            part = min(left, _LONG_POLL_SLICE)
            response = self._request("GET", f"/v1/jobs/{job_id}/proof", params={"wait": part}, extra=part)
            if response.status_code == 200:
                return JobProof.model_validate(response.json())
            if left <= part:
                return None

    def cancel(self, job_id: str) -> JobView:
        """Cancel the job; returns its view after cancellation."""
        return JobView.model_validate(self._call("DELETE", f"/v1/jobs/{job_id}"))

    # --- kinds and circuits -------------------------------------------------------------------

    def kinds(self) -> list[KindInfo]:
        """The proof kinds the daemon proves."""
        return [KindInfo.model_validate(item) for item in self._call("GET", "/v1/kinds")]

    def verification_key(self, kind: str, circuit: str | None = None) -> dict[str, Any]:
        """The kind's verification key (snarkjs verification_key.json); for ``circom``, ``circuit``'s."""
        params = {"circuit": circuit} if circuit is not None else {}
        key: dict[str, Any] = self._call("GET", f"/v1/kinds/{kind}/verification_key", params=params)
        return key

    def register_circuit(
        self, name: str, zkey: str | Path, *, wasm: str | Path | None = None, priority: str = "normal"
    ) -> CircuitInfo:
        """Register a circom circuit (paths on the daemon's machine) so jobs of kind circom can use it."""
        request = CircuitRegistration.model_validate(
            {
                "name": name,
                "zkey": str(Path(zkey).resolve()),
                "wasm": str(Path(wasm).resolve()) if wasm is not None else None,
                "priority": priority,
            }
        )
        answer = self._call("POST", "/v1/circuits", json=request.model_dump(mode="json"))
        return CircuitInfo.model_validate(answer)

    def circuits(self) -> list[CircuitInfo]:
        """The registered circom circuits."""
        return [CircuitInfo.model_validate(item) for item in self._call("GET", "/v1/circuits")]

    def upload_circuit(
        self,
        name: str,
        zkey: str | Path,
        *,
        wasm: str | Path | None = None,
        priority: str = "normal",
        progress: Progress | None = None,
    ) -> CircuitInfo:
        """Register a circom circuit from files on this machine: they are sent in the request, streamed
        (``PUT /v1/circuits/{name}``), with their SHA-256 for the daemon to check. When the daemon holds the
        circuit under ``name`` with that digest already, nothing is sent."""
        files = [("zkey", Path(zkey))] + ([("wasm", Path(wasm))] if wasm is not None else [])
        digest = circuit_digest(zkey, wasm)
        for known in self.circuits():
            if known.name == name and known.digest == digest:
                return known
        params = {"digest": digest, "priority": priority}
        answer = self._upload("PUT", f"/v1/circuits/{name}", files, params, progress)
        return CircuitInfo.model_validate(answer)

    def submit_witnesses(
        self,
        circuit: str,
        witnesses: Iterable[str | Path],
        *,
        job_id: str | None = None,
        priority: str | None = None,
        progress: Progress | None = None,
    ) -> str:
        """Submit a job on a registered circuit whose ``.wtns`` files, on this machine, are sent in the
        request (one partition each, in order; ``POST /v1/circuits/{circuit}/jobs``); its id."""
        files = [("wtns", Path(w)) for w in witnesses]
        params = {k: v for k, v in (("job_id", job_id), ("priority", priority)) if v is not None}
        answer = self._upload("POST", f"/v1/circuits/{circuit}/jobs", files, params, progress)
        job: str = answer["job_id"]
        return job

    # --- status -------------------------------------------------------------------------------

    def status(self, *, waiting: int | None = None, ended: int | None = None) -> dict[str, Any]:
        """The daemon's `/status` snapshot: every job holding work whole, ``waiting`` of the jobs that wait
        (the next to run) and ``ended`` of those ended (the last to end); by default the daemon's 20 of
        each (``?next=`` and ``?ended=``)."""
        bounds = {"next": waiting, "ended": ended}
        params = {name: str(n) for name, n in bounds.items() if n is not None}
        snapshot: dict[str, Any] = self._call("GET", "/status", params=params or None)
        return snapshot

    def metrics(self) -> str:
        """The Prometheus text of `/metrics`."""
        return self._request("GET", "/metrics").text

    def health(self) -> bool:
        """True when the daemon answers and can do its work; False otherwise (see :meth:`health_reason`)."""
        return self.health_reason() is None

    def health_reason(self) -> str | None:
        """None when the daemon is healthy; else why not (unreachable, starting, a device without a live
        worker, a stalled queue: what ``/healthz`` says)."""
        try:
            response = self._http.get("/healthz", timeout=min(self._timeout, 5.0))
        except httpx.HTTPError as exc:
            return f"does not answer ({type(exc).__name__})"
        if response.status_code == 200:
            return None
        try:
            detail = str(response.json().get("detail") or "")
        except ValueError:
            detail = ""
        return detail or f"/healthz answered {response.status_code}"

    def events(self, last_event_id: int | str | None = None) -> Generator[ServerEvent, None, None]:
        """Iterate over the server-sent events, from after ``last_event_id`` when given: an event's
        ``resume_id`` (``<boot_id>:<seq>``), or a ``seq`` of this boot's ``/status``. An id of an earlier boot
        of the daemon starts with a ``resync`` event instead (fetch ``/status`` and carry on).

        The iterator runs until the daemon closes the stream; heartbeats are skipped. Close it (or use
        ``contextlib.closing``) to end the connection early.
        """
        headers = {"Last-Event-ID": str(last_event_id)} if last_event_id is not None else {}
        timeout = httpx.Timeout(self._timeout, read=None)
        try:
            with self._http.stream("GET", "/v1/events", headers=headers, timeout=timeout) as response:
                if response.status_code >= 400:
                    response.read()
                    raise _error(response)
                yield from parse_sse(response.iter_lines())
        except httpx.TransportError as exc:
            raise DaemonUnreachable(f"{self.url}: {exc}") from None

    # --- plumbing -----------------------------------------------------------------------------

    def _upload(
        self,
        method: str,
        path: str,
        files: list[tuple[str, Path]],
        params: dict[str, str],
        progress: Progress | None,
    ) -> Any:
        """Send ``files`` as one multipart body, read from disk as it is sent; the daemon's answer."""
        headers, body = multipart_upload(files, progress)
        return self._call(
            method, path, params=params, content=body, headers=headers, extra=_UPLOAD_ANSWER_SECS
        )

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        return self._request(method, path, **kwargs).json()

    def _request(self, method: str, path: str, *, extra: float = 0.0, **kwargs: Any) -> httpx.Response:
        timeout = self._timeout + extra
        try:
            response = self._http.request(method, path, timeout=timeout, **kwargs)
        except httpx.TransportError as exc:
            raise DaemonUnreachable(f"cannot reach the prooflane daemon at {self.url}: {exc}") from None
        if response.status_code >= 400:
            raise _error(response)
        return response


def circuit_digest(zkey: str | Path, wasm: str | Path | None = None) -> str:
    """The SHA-256 (hex) by which a daemon knows a circuit's files: of the .zkey followed by the .wasm, or
    by ``-`` without one (``CircuitInfo.digest``, ``PUT /v1/circuits/{name}?digest=``)."""
    digest = hashlib.sha256()
    for path in (zkey, wasm):
        if path is None:
            digest.update(b"-")
            continue
        with open(path, "rb") as file:
            while chunk := file.read(_UPLOAD_CHUNK):
                digest.update(chunk)
    return digest.hexdigest()


def job_request(
    kind: str,
    *,
    sector: str | Path | InlineSector | None = None,
    randomness: str | None = None,
    priority: str | None = None,
    job_id: str | None = None,
    circuit: str | None = None,
    witnesses: list[str | dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The JSON body of ``POST /v1/jobs`` (see :meth:`Client.submit`), checked by the request model
    (pydantic's ValidationError, a ValueError, naming the field)."""
    fields: dict[str, Any] = {
        "kind": kind,
        "sector": str(sector.resolve()) if isinstance(sector, Path) else sector,
        "randomness": randomness,
        "priority": priority,
        "job_id": job_id,
        "circuit": circuit,
        "witnesses": witnesses,
    }
    request = JobRequest.model_validate({k: v for k, v in fields.items() if v is not None})
    body: dict[str, Any] = request.model_dump(mode="json", exclude_none=True)
    return body


def multipart_upload(
    files: list[tuple[str, Path]], progress: Progress | None = None
) -> tuple[dict[str, str], Iterator[bytes]]:
    """The headers and the body (read from disk as it is sent) of a ``multipart/form-data`` request of
    ``files`` (field name, path), in order."""
    boundary = uuid.uuid4().hex
    heads = [_part_head(boundary, field, path, first=i == 0) for i, (field, path) in enumerate(files)]
    tail = f"\r\n--{boundary}--\r\n".encode()
    try:
        total = sum(len(h) for h in heads) + sum(p.stat().st_size for _, p in files) + len(tail)
    except OSError as exc:
        raise FileNotFoundError(f"{exc.filename}: {exc.strerror}") from None
    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}", "Content-Length": str(total)}
    return headers, _multipart_body(heads, [p for _, p in files], tail, total, progress)


def _part_head(boundary: str, field: str, path: Path, *, first: bool) -> bytes:
    filename = path.name.replace('"', "%22").replace("\r", "").replace("\n", "")
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="{field}"; filename="{filename}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    )
    return (b"" if first else b"\r\n") + head.encode()


def _multipart_body(
    heads: list[bytes], paths: list[Path], tail: bytes, total: int, progress: Progress | None
) -> Iterator[bytes]:
    """The body, a chunk at a time: each part's head, then its file read from disk; the closing tail."""
    sent = 0
    for head, path in zip(heads, paths, strict=True):
        yield head
        sent += len(head)
        with open(path, "rb") as file:
            while chunk := file.read(_UPLOAD_CHUNK):
                yield chunk
                sent += len(chunk)
                if progress is not None:
                    progress(sent, total)
    yield tail
    if progress is not None:
        progress(total, total)


def _error(response: httpx.Response) -> DaemonError:
    try:
        detail = response.json().get("detail", response.text)
    except (ValueError, AttributeError):
        detail = response.text
    return DaemonError(response.status_code, str(detail))


def parse_sse(lines: Iterator[str]) -> Iterator[ServerEvent]:
    """Parse server-sent event lines into events (comments and heartbeats are skipped)."""
    event_id: int | None = None
    boot: str | None = None
    name = "message"
    data: list[str] = []
    for line in lines:
        if line == "":
            if data:
                yield ServerEvent(event_id, name, _json_or_text("\n".join(data)), boot)
            event_id, boot, name, data = None, None, "message", []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "id":
            prefix, _, number = value.rpartition(":")
            event_id = int(number) if number.isdigit() else None
            boot = prefix or None
        elif field == "event":
            name = value
        elif field == "data":
            data.append(value)


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text
