"""The HTTP layer: routing, validation, auth, limits, long-poll, SSE framing (over a fake engine)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from fake_engine import FakeEngine, api_config
from prooflane.api import DASHBOARD, ApiSettings, _event_stream, close_streams, create_app
from prooflane.models import JobState

pytestmark = pytest.mark.anyio
TOKEN = "s3cret"
Http = httpx.AsyncClient


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def make(engine: FakeEngine | None = None, token: str = "") -> tuple[FastAPI, FakeEngine, Http]:
    engine = engine or FakeEngine()
    app = create_app(engine, api_config(token))
    return app, engine, Http(transport=httpx.ASGITransport(app=app), base_url="http://test")


@pytest.fixture
async def http() -> AsyncIterator[Http]:
    async with make()[2] as client:
        yield client


async def submit(client: Http, **fields: object) -> str:
    body = {"kind": "porep-c2", "sector": "/tmp/sector"} | fields
    response = await client.post("/v1/jobs", json=body)
    assert response.status_code == 202, response.text
    job_id: str = response.json()["job_id"]
    return job_id


async def test_submit_answers_202_with_the_job_id(http: Http) -> None:
    job_id = await submit(http)
    answer = await http.get(f"/v1/jobs/{job_id}")
    assert answer.status_code == 200
    assert answer.json()["job_id"] == job_id
    assert answer.json()["state"] == "queued"
    assert len(answer.json()["partitions"]) == 10


async def test_resubmitting_a_job_id_is_idempotent(http: Http) -> None:
    first = await submit(http, job_id="mine-1")
    second = await submit(http, job_id="mine-1")
    assert first == second == "mine-1"
    assert len((await http.get("/v1/jobs")).json()) == 1


async def test_a_different_request_under_a_used_job_id_is_409(http: Http) -> None:
    await submit(http, job_id="mine-1")
    answer = await http.post("/v1/jobs", json={"kind": "winning-post", "sector": "/x", "job_id": "mine-1"})
    assert answer.status_code == 409
    assert "mine-1" in answer.json()["detail"]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"sector": "/x"}, "kind: Field required"),
        ({"kind": "porep-c2"}, "needs 'sector'"),
        ({"kind": "porep-c2", "sector": "/x", "randomness": "zz"}, "randomness"),
        ({"kind": "porep-c2", "sector": "/x", "priority": "urgent"}, "priority"),
        ({"kind": "porep-c2", "sector": "/x", "colour": "red"}, "colour"),
        ({"kind": "porep-c2", "sector": "/x", "job_id": "a b"}, "job_id"),
    ],
)
async def test_a_bad_job_request_is_422_naming_the_field(http: Http, body: object, says: str) -> None:
    answer = await http.post("/v1/jobs", json=body)
    assert answer.status_code == 422
    assert says in answer.json()["detail"]


async def test_a_body_that_is_not_json_is_422(http: Http) -> None:
    answer = await http.post("/v1/jobs", content=b"{nope", headers={"content-type": "application/json"})
    assert answer.status_code == 422
    assert "JSON" in answer.json()["detail"]


async def test_an_unknown_kind_is_404_with_the_engines_detail(http: Http) -> None:
    answer = await http.post("/v1/jobs", json={"kind": "nope", "sector": "/x"})
    assert answer.status_code == 404
    assert "unknown proof kind 'nope'" in answer.json()["detail"]


async def test_an_unknown_route_or_method_says_which(http: Http) -> None:
    missing = await http.get("/v1/nothing-here")
    assert missing.status_code == 404
    assert "GET /v1/nothing-here" in missing.json()["detail"]
    wrong = await http.put("/v1/jobs")
    assert wrong.status_code == 405
    assert "PUT is not allowed on /v1/jobs" in wrong.json()["detail"]


async def test_an_unknown_job_is_404_everywhere(http: Http) -> None:
    for method, path in [
        ("GET", "/v1/jobs/ghost"),
        ("GET", "/v1/jobs/ghost/proof"),
        ("DELETE", "/v1/jobs/ghost"),
    ]:
        answer = await http.request(method, path)
        assert answer.status_code == 404, (method, path)
        assert "ghost" in answer.json()["detail"]


async def test_jobs_lists_the_journal_and_filters_by_state() -> None:
    _, engine, http = make()
    first, second = await submit(http), await submit(http)
    engine.finish(first)
    assert [j["job_id"] for j in (await http.get("/v1/jobs")).json()] == [second, first]
    assert [j["job_id"] for j in (await http.get("/v1/jobs", params={"state": "done"})).json()] == [first]
    assert len((await http.get("/v1/jobs", params={"limit": 1})).json()) == 1


async def test_jobs_refuses_an_unknown_state_and_a_bad_limit(http: Http) -> None:
    answer = await http.get("/v1/jobs", params={"state": "sleeping"})
    assert answer.status_code == 400
    assert "sleeping" in answer.json()["detail"]
    assert "queued" in answer.json()["detail"]
    answer = await http.get("/v1/jobs", params={"limit": 0})
    assert answer.status_code == 422
    assert "limit" in answer.json()["detail"]


async def test_proof_of_a_job_not_done_is_202_with_its_state(http: Http) -> None:
    job_id = await submit(http)
    answer = await http.get(f"/v1/jobs/{job_id}/proof")
    assert answer.status_code == 202
    assert answer.json()["state"] == "queued"


async def test_proof_long_poll_returns_when_the_job_finishes() -> None:
    _, engine, http = make()
    job_id = await submit(http)
    polling = asyncio.create_task(http.get(f"/v1/jobs/{job_id}/proof", params={"wait": 60}))
    while not engine.done:  # noqa: ASYNC110  (yield until the request waits inside wait_proof)
        await asyncio.sleep(0)
    engine.finish(job_id)
    answer = await polling
    assert answer.status_code == 200
    assert answer.json()["job_id"] == job_id
    assert answer.json()["partitions"][0]["public"] == ["1"]


async def test_proof_of_a_failed_job_is_409_with_the_reason() -> None:
    _, engine, http = make()
    job_id = await submit(http)
    engine.finish(job_id, JobState.FAILED, "partition 3 did not verify")
    answer = await http.get(f"/v1/jobs/{job_id}/proof")
    assert answer.status_code == 409
    assert "partition 3 did not verify" in answer.json()["detail"]


async def test_a_wait_beyond_the_limit_is_400(http: Http) -> None:
    job_id = await submit(http)
    answer = await http.get(f"/v1/jobs/{job_id}/proof", params={"wait": 10_000})
    assert answer.status_code == 400
    assert "at most 300" in answer.json()["detail"]


async def test_cancel_answers_the_cancelled_job_and_refuses_a_finished_one() -> None:
    _, engine, http = make()
    job_id, done_id = await submit(http), await submit(http)
    answer = await http.delete(f"/v1/jobs/{job_id}")
    assert answer.status_code == 200
    assert answer.json()["state"] == "cancelled"
    assert (await http.delete(f"/v1/jobs/{job_id}")).status_code == 200  # cancelling twice is harmless
    engine.finish(done_id)
    answer = await http.delete(f"/v1/jobs/{done_id}")
    assert answer.status_code == 409
    assert "already finished (done)" in answer.json()["detail"]


async def test_mutating_routes_need_the_bearer_token_when_one_is_set() -> None:
    _, _, http = make(token=TOKEN)
    body = {"kind": "porep-c2", "sector": "/x"}
    missing = await http.post("/v1/jobs", json=body)
    assert missing.status_code == 401
    assert "bearer token" in missing.json()["detail"]
    assert missing.headers["www-authenticate"] == "Bearer"
    wrong = await http.post("/v1/jobs", json=body, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    assert wrong.json()["detail"] == "wrong bearer token"
    basic = await http.post("/v1/jobs", json=body, headers={"Authorization": "Basic abc"})
    assert "malformed" in basic.json()["detail"]
    right = await http.post("/v1/jobs", json=body, headers={"Authorization": f"Bearer {TOKEN}"})
    assert right.status_code == 202
    job_id = right.json()["job_id"]
    assert (await http.delete(f"/v1/jobs/{job_id}")).status_code == 401
    assert (await http.get(f"/v1/jobs/{job_id}")).status_code == 200  # reading needs no token
    assert (await http.get("/status")).status_code == 200


async def test_a_body_over_the_limit_is_413_whether_sized_or_chunked(http: Http) -> None:
    big = b'{"kind": "porep-c2", "sector": "' + b"x" * 5000 + b'"}'
    sized = await http.post("/v1/jobs", content=big, headers={"content-type": "application/json"})
    assert sized.status_code == 413
    assert "at most 4096 bytes" in sized.json()["detail"]

    async def chunks() -> AsyncIterator[bytes]:
        yield big[:3000]
        yield big[3000:]

    chunked = await http.post("/v1/jobs", content=chunks())
    assert chunked.status_code == 413


async def test_healthz_and_submit_wait_for_the_engine_to_be_ready() -> None:
    _, engine, http = make(FakeEngine(ready=False))
    assert (await http.get("/healthz")).status_code == 503
    refused = await http.post("/v1/jobs", json={"kind": "porep-c2", "sector": "/x"})
    assert refused.status_code == 503
    assert "starting" in refused.json()["detail"]
    engine.ready = True
    assert (await http.get("/healthz")).json()["ok"] is True


async def test_kinds_and_verification_keys(http: Http) -> None:
    names = [kind["name"] for kind in (await http.get("/v1/kinds")).json()]
    assert names == ["porep-c2", "winning-post"]
    assert (await http.get("/v1/kinds/porep-c2/verification_key")).json()["protocol"] == "groth16"
    unknown = await http.get("/v1/kinds/nope/verification_key")
    assert unknown.status_code == 404
    assert "nope" in unknown.json()["detail"]
    circom = await http.get("/v1/kinds/circom/verification_key")
    assert circom.status_code == 400
    assert "?circuit=" in circom.json()["detail"]


async def test_register_a_circuit_then_list_it(tmp_path: Path) -> None:
    _, _, http = make(token=TOKEN)
    zkey = tmp_path / "c.zkey"
    zkey.write_bytes(b"zkey")
    auth = {"Authorization": f"Bearer {TOKEN}"}
    body = {"name": "mul", "zkey": str(zkey)}
    assert (await http.post("/v1/circuits", json=body)).status_code == 401
    answer = await http.post("/v1/circuits", json=body, headers=auth)
    assert answer.status_code == 201
    assert answer.json()["name"] == "mul"
    assert [c["name"] for c in (await http.get("/v1/circuits")).json()] == ["mul"]
    missing = await http.post("/v1/circuits", json={"name": "x", "zkey": "/nope.zkey"}, headers=auth)
    assert missing.status_code == 422
    assert "/nope.zkey" in missing.json()["detail"]


async def test_status_is_the_trackers_snapshot(http: Http) -> None:
    await submit(http)
    snapshot = (await http.get("/status")).json()
    assert (snapshot["seq"], snapshot["invariants_ok"]) == (1, True)


async def test_metrics_are_prometheus_text(http: Http) -> None:
    answer = await http.get("/metrics")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert "# TYPE prooflane_partitions_total counter" in answer.text


async def test_openapi_describes_the_routes_from_the_models(http: Http) -> None:
    spec = (await http.get("/openapi.json")).json()
    assert {"/v1/jobs", "/v1/jobs/{job_id}", "/v1/jobs/{job_id}/proof", "/status", "/healthz"} <= set(
        spec["paths"]
    )
    assert {"JobRequest", "JobView", "JobProof", "KindInfo"} <= set(spec["components"]["schemas"])


@pytest.mark.skipif(not (DASHBOARD / "index.html").exists(), reason="dashboard not built in")
async def test_the_dashboard_is_served_at_the_root(http: Http) -> None:
    page = await http.get("/")
    assert page.status_code == 200
    assert "<html" in page.text.lower()
    assert (await http.get("/no-such-file.js")).status_code == 404


async def collect(engine: FakeEngine, resume: int | None, count: int) -> list[str]:
    """Run the SSE generator until ``count`` frames (the greeting included) came out."""
    frames: list[str] = []
    stream = _event_stream(engine, resume, 60.0, asyncio.Event())
    async for frame in stream:
        frames.append(frame)
        if len(frames) == count:
            break
    await stream.aclose()
    return frames


async def test_events_are_framed_with_ids_and_names() -> None:
    engine = FakeEngine()
    engine.tracker.publish("job_submitted", job_id="a")
    engine.tracker.publish("job_done", job_id="a")
    frames = await collect(engine, None, 3)
    assert frames[0].startswith(": prooflane event stream\nretry: 1000")
    assert frames[1] == 'id: 1\nevent: job_submitted\ndata: {"job_id": "a"}\n\n'
    assert frames[2].startswith("id: 2\nevent: job_done\n")


async def test_events_resume_after_the_last_event_id_without_a_gap() -> None:
    engine = FakeEngine()
    for n in range(5):
        engine.tracker.publish("job_submitted", job_id=str(n))
    frames = await collect(engine, 2, 4)
    assert [f.splitlines()[0] for f in frames[1:]] == ["id: 3", "id: 4", "id: 5"]


async def test_events_that_arrive_later_are_streamed_too() -> None:
    engine = FakeEngine()
    waiting = asyncio.create_task(collect(engine, None, 2))
    await asyncio.sleep(0.01)
    engine.tracker.publish("job_done", job_id="late")
    frames = await waiting
    assert frames[1].startswith("id: 1\nevent: job_done")


async def test_events_send_heartbeats_while_nothing_happens_and_end_on_close() -> None:
    closing = asyncio.Event()
    frames = []
    async for frame in _event_stream(FakeEngine(), None, 0.01, closing):
        frames.append(frame)
        if len(frames) == 3:
            closing.set()
    assert frames[1:] == [": heartbeat\n\n", ": heartbeat\n\n"]


async def test_a_bad_last_event_id_is_400(http: Http) -> None:
    answer = await http.get("/v1/events", headers={"Last-Event-ID": "abc"})
    assert answer.status_code == 400
    assert "abc" in answer.json()["detail"]


async def test_close_streams_ends_open_event_streams() -> None:
    app, _, _ = make()
    close_streams(app)
    assert app.state.closing.is_set()


async def test_settings_come_from_the_config() -> None:
    settings = ApiSettings.from_config(api_config("tok"))
    assert settings.token == "tok"
    assert settings.max_body_bytes == 4096
    assert ApiSettings.from_config(api_config("")).token is None


async def test_head_status_and_healthz_answer_without_a_body(http: Http) -> None:
    for path in ("/status", "/healthz"):
        answer = await http.head(path)
        assert answer.status_code == 200
        assert answer.content == b""


async def test_405_names_the_methods_the_route_takes(http: Http) -> None:
    answer = await http.delete("/status")
    assert answer.status_code == 405
    assert answer.headers["allow"] == "GET, HEAD"
    answer = await http.put("/v1/jobs/abc")
    assert answer.status_code == 405
    assert answer.headers["allow"] == "DELETE, GET"


async def test_a_job_id_with_a_trailing_newline_is_refused(http: Http) -> None:
    answer = await http.post("/v1/jobs", json={"kind": "porep-c2", "sector": "/tmp/s", "job_id": "abc\n"})
    assert answer.status_code == 422
    assert "job_id" in answer.json()["detail"]


async def test_deeply_nested_circuit_inputs_are_refused(http: Http) -> None:
    nested: dict[str, object] = {}
    cur = nested
    for _ in range(256):
        cur["a"] = {}
        cur = cur["a"]  # type: ignore[assignment]
    answer = await http.post("/v1/jobs", json={"kind": "circom", "circuit": "c", "witnesses": [nested]})
    assert answer.status_code == 422
    assert "levels deep" in answer.json()["detail"]


async def test_a_long_poll_open_at_shutdown_gets_202_at_once() -> None:
    app, _, client = make()
    async with client:
        job_id = await submit(client)
        poll = asyncio.create_task(client.get(f"/v1/jobs/{job_id}/proof", params={"wait": 250}))
        await asyncio.sleep(0.05)
        close_streams(app)
        answer = await poll
        assert answer.status_code == 202
        assert answer.json()["job_id"] == job_id
