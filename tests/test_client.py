"""`prooflane.Client` against the real HTTP app and server (uvicorn in a thread) over a fake engine."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

import prooflane
from fake_engine import FakeEngine, Served
from fake_engine import served as serve_app
from prooflane.client import Client, ServerEvent, parse_sse
from prooflane.errors import DaemonError, DaemonUnreachable
from prooflane.server import bind

TOKEN = "t0ken"


@pytest.fixture
def served() -> Iterator[Served]:
    with serve_app(FakeEngine(), TOKEN) as running:
        yield running


@pytest.fixture
def client(served: Served) -> Iterator[Client]:
    with Client(served.url, TOKEN) as c:
        yield c


def test_client_is_exported_from_the_package() -> None:
    assert prooflane.Client is Client


def test_submit_job_jobs_and_an_idempotent_job_id(client: Client) -> None:
    job_id = client.submit("porep-c2", sector="/tmp/sector-1", randomness="00ff", priority="high")
    view = client.job(job_id)
    assert view.job_id == job_id
    assert view.priority == "high"
    assert view.total_partitions == 10
    assert client.submit("winning-post", sector="/tmp/s", job_id="w-1") == "w-1"
    assert client.submit("winning-post", sector="/tmp/s", job_id="w-1") == "w-1"
    assert [v.job_id for v in client.jobs()] == ["w-1", job_id]
    assert [v.job_id for v in client.jobs(state="queued", limit=1)] == ["w-1"]


def test_sector_paths_are_sent_absolute(served: Served, client: Client) -> None:
    job_id = client.submit("porep-c2", sector=Path("relative/sector"))
    sent = served.engine.requests[job_id].sector
    assert isinstance(sent, str)
    assert Path(sent).is_absolute()


def test_proof_is_none_until_done_then_the_proof(served: Served, client: Client) -> None:
    job_id = client.submit("porep-c2", sector="/tmp/s")
    assert client.proof(job_id) is None
    served.call(lambda: served.loop.call_later(0.1, served.engine.finish, job_id))
    found = client.proof(job_id, wait=30)
    assert found is not None
    assert found.job_id == job_id
    assert found.partitions[0].public == ["1"]


def test_errors_carry_the_status_and_the_daemons_detail(client: Client) -> None:
    with pytest.raises(DaemonError) as missing:
        client.job("ghost")
    assert missing.value.status == 404
    assert "ghost" in missing.value.detail
    with pytest.raises(DaemonError) as unknown:
        client.submit("no-such-kind", sector="/tmp/s")
    assert unknown.value.status == 404
    assert "no-such-kind" in str(unknown.value)


def test_a_missing_token_is_refused_with_401(served: Served) -> None:
    with Client(served.url) as anonymous, pytest.raises(DaemonError) as refused:
        anonymous.submit("porep-c2", sector="/tmp/s")
    assert refused.value.status == 401
    assert "bearer token" in refused.value.detail


def test_cancel_and_a_failed_proof(served: Served, client: Client) -> None:
    job_id = client.submit("porep-c2", sector="/tmp/s")
    assert client.cancel(job_id).state == "cancelled"
    with pytest.raises(DaemonError) as no_proof:
        client.proof(job_id)
    assert no_proof.value.status == 409


def test_kinds_keys_circuits_status_and_health(client: Client, tmp_path: Path) -> None:
    assert [k.name for k in client.kinds()] == ["porep-c2", "winning-post"]
    assert client.verification_key("porep-c2")["protocol"] == "groth16"
    info = client.register_circuit("mul", tmp_path / "mul.zkey", wasm=tmp_path / "mul.wasm")
    assert info.has_witness_generator
    assert [c.name for c in client.circuits()] == ["mul"]
    assert client.status()["invariants_ok"] is True
    assert client.health() is True


def test_events_stream_and_resume(served: Served, client: Client) -> None:
    for n in range(4):
        served.call(lambda n=n: served.engine.tracker.publish("job_submitted", job_id=str(n)))
    with contextlib.closing(client.events()) as stream:
        first = list(itertools.islice(stream, 2))
    assert [(e.id, e.name, e.data) for e in first] == [
        (1, "job_submitted", {"job_id": "0"}),
        (2, "job_submitted", {"job_id": "1"}),
    ]
    with contextlib.closing(client.events(last_event_id=first[-1].id)) as stream:
        rest = list(itertools.islice(stream, 2))
    assert [e.id for e in rest] == [3, 4]


def test_an_unreachable_daemon_is_reported_as_such() -> None:
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    sock.close()
    with Client(f"http://127.0.0.1:{port}") as client:
        assert client.health() is False
        with pytest.raises(DaemonUnreachable) as gone:
            client.status()
    assert f"127.0.0.1:{port}" in str(gone.value)


def test_parse_sse_skips_comments_and_joins_data_lines() -> None:
    lines = [": hello", "retry: 1000", "", "id: 7", "event: resync", 'data: {"seq":', "data: 7}", ""]
    lines += ["data: plain", ""]
    assert list(parse_sse(iter(lines))) == [
        ServerEvent(7, "resync", {"seq": 7}),
        ServerEvent(None, "message", "plain"),
    ]
