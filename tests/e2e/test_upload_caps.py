"""Trickling witness uploads against a real daemon, over real sockets: they count at the connection caps and
leave a reserve of connections for short requests, so `/healthz` answers 200 from the very address that holds
them, and from everyone; the uploads past their share are answered 503, an answer their client reads.

256 such uploads from 127.0.0.1, each sending a byte now and then, once locked `/healthz` out for every client
of 127.0.0.1 (0 of 25 answered); 1,030 from four loopback addresses locked everyone out. The daemon here has
an hour-long ``request_timeout_secs``, so no upload is judged by its rate meanwhile (its first window is its
grace): only the reserve keeps `/healthz` answering (the rate and the order of making room are tested on a
test clock in ``tests/server/test_limits_uploads.py``).
"""

from __future__ import annotations

import contextlib
import resource
import selectors
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from prooflane.cli.daemon_process import DaemonProcess
from prooflane.client import Client
from prooflane.config import Config
from tests.support.daemons import TIMEOUT, circom_files, start_daemon

pytestmark = [pytest.mark.timeout(600)]

TOKEN = "upload-caps"
RESERVE = Config.reserved_connections
PER_CLIENT = Config.max_connections_per_client
CONNECTIONS = Config.max_connections


@pytest.fixture
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    """A daemon of its own (nothing of another test's counts at its caps) with the default caps, no upload
    judged by its rate for an hour, and the circuit ``wp`` uploaded."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = CONNECTIONS + 512
    if hard != resource.RLIM_INFINITY and hard < wanted:
        pytest.skip(f"this test opens {CONNECTIONS} sockets; its own hard limit of open files is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, wanted), hard))
    running = start_daemon(
        tmp_path_factory, "upload-caps", token=TOKEN, extra_config="request_timeout_secs = 3600\n"
    )
    try:
        files = circom_files(tmp_path_factory.mktemp("client-side"))
        with Client(running.url, TOKEN) as client:
            client.upload_circuit("wp", files["zkey"])
        yield running
    finally:
        running.stop()


def trickle(daemon: DaemonProcess, client: str) -> socket.socket:
    """A witness upload from ``client`` (a loopback address) begun: its head, its part's head and one byte
    of its witness sent; the rest would come a byte every 20 s."""
    port = int(daemon.url.rsplit(":", 1)[1])
    sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT, source_address=(client, 0))
    part = b'--b0undary\r\nContent-Disposition: form-data; name="wtns"; filename="w"\r\n\r\n'
    head = (
        f"POST /v1/circuits/wp/jobs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {TOKEN}\r\n"
        "Content-Type: multipart/form-data; boundary=b0undary\r\nContent-Length: 100000\r\n\r\n"
    )
    sock.sendall(head.encode() + part + b"w")
    return sock


def healthz(daemon: DaemonProcess, client: str) -> int:
    transport = httpx.HTTPTransport(local_address=client)
    with httpx.Client(transport=transport, timeout=60) as http:
        return http.get(f"{daemon.url}/healthz").status_code


def refused(uploads: list[socket.socket], expected: int) -> list[bytes]:
    """The answers of the uploads the daemon refused, once ``expected`` of them have come (each read to the
    end, its socket closed and taken out of ``uploads``); fails after ``TIMEOUT`` seconds."""
    answers: list[bytes] = []
    with selectors.DefaultSelector() as waiting:
        for sock in uploads:
            waiting.register(sock, selectors.EVENT_READ)
        deadline = time.monotonic() + TIMEOUT
        while len(answers) < expected and time.monotonic() < deadline:
            for key, _ in waiting.select(timeout=1):
                answered = key.fileobj
                assert isinstance(answered, socket.socket)
                waiting.unregister(answered)
                answers.append(_to_the_end(answered))
                uploads.remove(answered)
                answered.close()
    assert len(answers) == expected, f"{len(answers)} uploads answered, where {expected} are past the caps"
    return answers


def _to_the_end(sock: socket.socket) -> bytes:
    answer = b""
    while chunk := sock.recv(65536):  # a reset (ConnectionResetError) fails the test
        answer += chunk
    return answer


def still_open(uploads: list[socket.socket]) -> bool:
    """Whether the daemon has neither answered nor closed any of ``uploads``."""
    for sock in uploads:
        sock.setblocking(False)
        try:
            sock.recv(1)
            return False  # an answer, or the end
        except BlockingIOError:
            pass
        finally:
            sock.setblocking(True)
    return True


def close(uploads: list[socket.socket]) -> None:
    for sock in uploads:
        with contextlib.suppress(OSError):
            sock.close()


def test_256_trickling_uploads_from_one_address_leave_healthz_answering_there(daemon: DaemonProcess) -> None:
    uploads = [trickle(daemon, "127.0.0.1") for _ in range(256)]
    try:
        held = PER_CLIENT - RESERVE
        answers = refused(uploads, 256 - held)
        for answer in answers:
            assert answer.startswith(b"HTTP/1.1 503") and b"kept for short requests" in answer, answer[:300]
            assert b"connection: close" in answer.lower()
        assert [healthz(daemon, "127.0.0.1") for _ in range(25)] == [200] * 25
        assert healthz(daemon, "127.0.0.2") == 200
        assert len(uploads) == held and still_open(uploads)  # the uploads within the share go on
    finally:
        close(uploads)


def test_trickling_uploads_from_five_addresses_leave_healthz_answering_for_everyone(
    daemon: DaemonProcess,
) -> None:
    """Each address within its own share (200 of 256), all together past the daemon's (1,000 of 1,024: so
    that no connection is ever over the cap itself, where making room would close another)."""
    addresses = [f"127.0.1.{i}" for i in range(1, 6)]
    uploads = [trickle(daemon, address) for address in addresses for _ in range(200)]
    try:
        held = CONNECTIONS - RESERVE
        answers = refused(uploads, len(uploads) - held)
        assert all(a.startswith(b"HTTP/1.1 503") and b"kept for short requests" in a for a in answers)
        for address in [*addresses, "127.0.1.9"]:
            assert [healthz(daemon, address) for _ in range(5)] == [200] * 5
        assert len(uploads) == held and still_open(uploads)
    finally:
        close(uploads)
