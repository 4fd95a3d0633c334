"""`prooflane.Client` against the real engine (the in-process backend, real proofs at ``tiny``) behind the
real HTTP app and a uvicorn server on a free port."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import prooflane
from prooflane.client import Client, ServerEvent, parse_sse
from prooflane.config import Config
from prooflane.errors import DaemonError, DaemonUnreachable
from prooflane.groth16 import Proof, VerificationKey, verify
from prooflane.server import bind
from tests.support.engine import Served, on_long_poll, served

pytestmark = pytest.mark.timeout(120)
TOKEN = "t0ken"


@pytest.fixture
def daemon(engine_config: Callable[..., Config], sector: Path) -> Iterator[Served]:
    with served(engine_config(), TOKEN, sector=sector) as running:
        yield running


@pytest.fixture
def client(daemon: Served) -> Iterator[Client]:
    with Client(daemon.url, TOKEN) as c:
        yield c


def test_client_is_exported_from_the_package() -> None:
    assert prooflane.Client is Client


def test_submit_job_jobs_and_an_idempotent_job_id(daemon: Served, client: Client, sector: Path) -> None:
    daemon.hold()  # every synthesis waits: nothing moves past the first partition
    job_id = client.submit("porep-c2", sector=sector, randomness="00ff", priority="high")
    view = client.job(job_id)
    assert view.job_id == job_id
    assert view.kind == "porep-c2"
    assert view.priority == "high"
    assert view.total_partitions == 10
    assert daemon.journalled_request(job_id)["randomness"] == "00ff"
    assert client.submit("winning-post", sector=sector, job_id="w-1") == "w-1"
    assert client.submit("winning-post", sector=sector, job_id="w-1") == "w-1"
    assert [v.job_id for v in client.jobs()] == ["w-1", job_id]
    assert [v.job_id for v in client.jobs(state="queued", limit=1)] == ["w-1"]


def test_sector_paths_are_sent_absolute(
    daemon: Served, client: Client, sector: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon.hold()
    monkeypatch.chdir(sector.parent)
    job_id = client.submit("porep-c2", sector=Path(sector.name))
    sent = daemon.journalled_request(job_id)["sector"]
    assert sent == str(sector.resolve())


def test_proof_is_none_until_done_then_the_proof(
    daemon: Served, client: Client, sector: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = daemon.hold()
    job_id = client.submit("winning-post", sector=sector)
    daemon.reached(held)
    assert client.proof(job_id) is None
    # The job goes on only once the client's long-poll waits for it inside the engine.
    daemon.call(lambda: on_long_poll(monkeypatch, daemon.engine, held.release.set))
    found = client.proof(job_id, wait=30)
    assert found is not None
    assert found.job_id == job_id and found.kind == "winning-post"
    (partition,) = found.partitions
    vk = VerificationKey.from_json(client.verification_key("winning-post"))
    public = tuple(int(x) for x in partition.public)
    assert verify(vk, public, Proof.from_json(partition.proof, public=public))


def test_errors_carry_the_status_and_the_daemons_detail(client: Client, sector: Path) -> None:
    with pytest.raises(DaemonError) as missing:
        client.job("ghost")
    assert missing.value.status == 404
    assert "ghost" in missing.value.detail
    with pytest.raises(DaemonError) as unknown:
        client.submit("no-such-kind", sector=sector)
    assert unknown.value.status == 404
    assert "no-such-kind" in str(unknown.value)
    with pytest.raises(DaemonError) as bad_sector:
        client.submit("porep-c2", sector=sector.parent / "no-such-sector")
    assert bad_sector.value.status == 422
    assert "no-such-sector" in bad_sector.value.detail


def test_a_missing_token_is_refused_with_401(daemon: Served, sector: Path) -> None:
    with Client(daemon.url) as anonymous, pytest.raises(DaemonError) as refused:
        anonymous.submit("porep-c2", sector=sector)
    assert refused.value.status == 401
    assert "bearer token" in refused.value.detail
    assert daemon.call(lambda: daemon.engine.jobs()) == []


def test_cancel_and_a_failed_proof(daemon: Served, client: Client, sector: Path) -> None:
    daemon.hold()
    job_id = client.submit("porep-c2", sector=sector)
    assert client.cancel(job_id).state == "cancelled"
    with pytest.raises(DaemonError) as no_proof:
        client.proof(job_id)
    assert no_proof.value.status == 409
    assert "cancelled" in no_proof.value.detail


def test_kinds_keys_circuits_status_and_health(client: Client, circuit_files: tuple[Path, Path]) -> None:
    assert [k.name for k in client.kinds()] == [
        "porep-c2",
        "snap-update",
        "window-post",
        "winning-post",
        "circom",
    ]
    assert client.verification_key("porep-c2")["protocol"] == "groth16"
    zkey, wasm = circuit_files
    info = client.register_circuit("chain", zkey, wasm=wasm, priority="high")
    assert info.has_witness_generator and info.priority == "high" and info.curve == "bn128"
    assert [c.name for c in client.circuits()] == ["chain"]
    assert client.status()["invariants_ok"] is True
    assert client.health() is True


def test_events_stream_and_resume(daemon: Served, client: Client, sector: Path) -> None:
    daemon.block_queue()  # from here on, a submit is one event: job_submitted
    seq = client.status()["seq"]
    jobs = [client.submit("porep-c2", sector=sector) for _ in range(3)]
    with contextlib.closing(client.events(last_event_id=seq)) as stream:
        first = list(itertools.islice(stream, 2))
    assert [(e.id, e.name) for e in first] == [(seq + 1, "job_submitted"), (seq + 2, "job_submitted")]
    assert [e.data["job_id"] for e in first] == jobs[:2]
    with contextlib.closing(client.events(last_event_id=first[-1].id)) as stream:
        rest = list(itertools.islice(stream, 1))
    assert [(e.id, e.name) for e in rest] == [(seq + 3, "job_submitted")]
    assert rest[0].data["job_id"] == jobs[2]


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
