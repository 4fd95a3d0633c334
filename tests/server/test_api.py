"""The HTTP layer over the real engine: routing, validation, auth, limits, long-poll, SSE framing.

The engine runs on the in-process backend (real proofs at the ``tiny`` profile, a real journal and tracker);
requests go through the ASGI app on the test's own event loop, so a gate can hold the engine at any step
while a request is in flight. The same app over a real socket is in test_client.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import html
import json
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from prooflane.config import Config
from prooflane.devices import InProcessBackend, Step
from prooflane.engine.engine import Engine
from prooflane.groth16 import Proof, VerificationKey, verify
from prooflane.server.api import DASHBOARD, ApiSettings, close_streams, create_app
from prooflane.server.sse import event_stream
from prooflane.states import JobState
from tests.support.engine import INLINE_SECTOR, WAIT, Harness, api_config, on_long_poll

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]
TOKEN = "s3cret"
Http = httpx.AsyncClient
HEARTBEAT = ": heartbeat\n\n"


def app_of(h: Harness, token: str = "") -> tuple[FastAPI, Http]:
    """The daemon's app around the test's engine, and a client that calls it in-process."""
    app = create_app(h.engine, api_config(h.engine.config, token))
    return app, Http(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1")


@pytest.fixture
async def http(h: Harness) -> AsyncIterator[Http]:
    async with app_of(h)[1] as client:
        yield client


@pytest.fixture
def job(sector: Path) -> dict[str, object]:
    """A porep-c2 request on the session's sector folder."""
    return {"kind": "porep-c2", "sector": str(sector)}


async def submit(client: Http, job: dict[str, object], **fields: object) -> str:
    response = await client.post("/v1/jobs", json=job | fields)
    assert response.status_code == 202, response.text
    job_id: str = response.json()["job_id"]
    return job_id


def verifies(engine: Engine, kind: str, partition: dict[str, Any]) -> bool:
    """Whether a partition of a proof answer verifies against the kind's verification key."""
    vk = VerificationKey.from_json(engine.verification_key(kind))
    public = tuple(int(x) for x in partition["public"])
    return bool(verify(vk, public, Proof.from_json(partition["proof"], public=public)))


async def test_submit_answers_202_with_the_job_id(h: Harness, http: Http, job: dict[str, object]) -> None:
    await h.block_queue()
    job_id = await submit(http, job)
    answer = await http.get(f"/v1/jobs/{job_id}")
    assert answer.status_code == 200
    assert answer.json()["job_id"] == job_id
    assert answer.json()["state"] == "queued"
    assert [p["state"] for p in answer.json()["partitions"]] == ["pending"] * 10


async def test_resubmitting_a_job_id_is_idempotent(h: Harness, http: Http, job: dict[str, object]) -> None:
    _, blocker = await h.block_queue()
    first = await submit(http, job, job_id="mine-1")
    second = await submit(http, job, job_id="mine-1")
    assert first == second == "mine-1"
    assert [j["job_id"] for j in (await http.get("/v1/jobs")).json()] == ["mine-1", blocker]


async def test_a_different_request_under_a_used_job_id_is_409(
    h: Harness, http: Http, job: dict[str, object]
) -> None:
    await h.block_queue()
    await submit(http, job, job_id="mine-1")
    answer = await http.post("/v1/jobs", json=job | {"kind": "winning-post", "job_id": "mine-1"})
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
    answer = await http.post("/v1/jobs", json={"kind": "nope", "sector": INLINE_SECTOR})
    assert answer.status_code == 404
    assert answer.json()["detail"].startswith("unknown kind 'nope': expected one of porep-c2,")


async def test_a_sector_the_daemon_cannot_open_is_422_with_the_engines_detail(
    h: Harness, http: Http, shared_inputs: Path
) -> None:
    missing = str(shared_inputs / "no-such-sector")  # inside a folder the daemon may read
    answer = await http.post("/v1/jobs", json={"kind": "porep-c2", "sector": missing})
    assert answer.status_code == 422
    assert answer.json()["detail"].startswith("sector ") and missing in answer.json()["detail"]
    assert h.engine.jobs() == []


async def test_a_sector_outside_the_allowed_folders_is_403(h: Harness, http: Http) -> None:
    answer = await http.post("/v1/jobs", json={"kind": "porep-c2", "sector": "/no/such/sector"})
    assert answer.status_code == 403
    assert "/no/such/sector" in answer.json()["detail"] and "allowed_roots" in answer.json()["detail"]
    assert h.engine.jobs() == []


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


async def test_jobs_lists_the_journal_and_filters_by_state(
    h: Harness, http: Http, job: dict[str, object]
) -> None:
    first = await submit(http, job, kind="winning-post")
    assert await h.done(first) is JobState.DONE
    _, blocker = await h.block_queue()
    second = await submit(http, job)
    assert [j["job_id"] for j in (await http.get("/v1/jobs")).json()] == [second, blocker, first]
    assert [j["job_id"] for j in (await http.get("/v1/jobs", params={"state": "done"})).json()] == [first]
    assert [j["job_id"] for j in (await http.get("/v1/jobs", params={"state": "queued"})).json()] == [second]
    assert [j["job_id"] for j in (await http.get("/v1/jobs", params={"limit": 1})).json()] == [second]


async def test_jobs_come_a_bounded_page_at_a_time_each_saying_where_the_next_starts(
    h: Harness, http: Http, job: dict[str, object]
) -> None:
    await h.block_queue()
    ids = [await submit(http, job) for _ in range(5)][::-1]  # newest first
    first = await http.get("/v1/jobs", params={"limit": 2})
    assert [j["job_id"] for j in first.json()] == ids[:2]
    next_page = first.headers["Link"]
    assert next_page == f'</v1/jobs?limit=2&before={ids[1]}>; rel="next"'
    second = await http.get(next_page[1 : next_page.index(">")])
    assert [j["job_id"] for j in second.json()][:2] == ids[2:4]
    assert (await http.get("/v1/jobs", params={"limit": 1001})).status_code == 422  # at most a page of 1,000
    unknown = await http.get("/v1/jobs", params={"before": "ghost"})
    assert unknown.status_code == 404 and "ghost" in unknown.json()["detail"]
    everything = (await http.get("/v1/jobs", params={"limit": 1000})).json()
    assert "Link" not in (await http.get("/v1/jobs", params={"limit": 1000})).headers  # the last page
    assert len(everything) == 6  # the five and the one holding the queue


async def test_a_job_is_running_from_its_first_synthesis_in_every_view(h: Harness, http: Http) -> None:
    _, job_id = await h.block_queue()  # its one partition is synthesizing, held there
    assert (await http.get(f"/v1/jobs/{job_id}")).json()["state"] == "running"
    assert [j["job_id"] for j in (await http.get("/v1/jobs", params={"state": "running"})).json()] == [job_id]
    assert (await http.get("/v1/jobs", params={"state": "queued"})).json() == []
    (pipeline,) = (await http.get("/status")).json()["pipelines"]
    assert (pipeline["job_id"], pipeline["state"]) == (job_id, "running")


async def test_jobs_refuses_an_unknown_state_and_a_bad_limit(http: Http) -> None:
    answer = await http.get("/v1/jobs", params={"state": "sleeping"})
    assert answer.status_code == 400
    assert "sleeping" in answer.json()["detail"]
    assert "queued" in answer.json()["detail"]
    answer = await http.get("/v1/jobs", params={"limit": 0})
    assert answer.status_code == 422
    assert "limit" in answer.json()["detail"]


async def test_proof_of_a_job_not_done_is_202_with_its_state(
    h: Harness, http: Http, job: dict[str, object]
) -> None:
    await h.block_queue()
    job_id = await submit(http, job)
    answer = await http.get(f"/v1/jobs/{job_id}/proof")
    assert answer.status_code == 202
    assert answer.json()["state"] == "queued"


async def test_proof_long_poll_returns_when_the_job_finishes(
    h: Harness, http: Http, monkeypatch: pytest.MonkeyPatch
) -> None:
    held, job_id = await h.block_queue()
    # The job goes on only once the request waits for it inside the engine.
    on_long_poll(monkeypatch, h.engine, held.release.set)
    answer = await http.get(f"/v1/jobs/{job_id}/proof", params={"wait": 60})
    assert answer.status_code == 200
    assert answer.json()["job_id"] == job_id
    (partition,) = answer.json()["partitions"]
    assert verifies(h.engine, "winning-post", partition)


async def test_proof_of_a_failed_job_is_409_with_the_reason(
    h: Harness, http: Http, job: dict[str, object]
) -> None:
    def broken(step: Step) -> None:
        raise ValueError("point at infinity in the MSM input")

    h.gate.act(lambda s: s.name == "prove_start", broken)
    job_id = await submit(http, job, kind="winning-post")
    assert await h.done(job_id) is JobState.FAILED
    answer = await http.get(f"/v1/jobs/{job_id}/proof")
    assert answer.status_code == 409
    assert "partition 0 failed" in answer.json()["detail"]
    assert "point at infinity in the MSM input" in answer.json()["detail"]


async def test_a_jobs_error_reads_as_people_read_it_and_the_journal_keeps_the_whole(
    h: Harness, http: Http, job: dict[str, object]
) -> None:
    raw = (
        "\x1b[31mError: Assert Failed.\x1b[0m\nError in template Mul_0 line: 7\n"
        "    at Object.calculateWitness (witness_calculator.js:195:27)\n    at node:internal/main:1:1"
    )

    def broken(step: Step) -> None:
        raise ValueError(raw)

    h.gate.act(lambda s: s.name == "prove_start", broken)
    job_id = await submit(http, job, kind="winning-post")
    assert await h.done(job_id) is JobState.FAILED
    error = (await http.get(f"/v1/jobs/{job_id}")).json()["error"]
    assert "Assert Failed" in error and "Mul_0 line: 7" in error
    assert "\x1b[" not in error and "    at " not in error and "node:internal" not in error
    journalled = h.engine._pipeline.journal.job(job_id)
    assert journalled is not None and "node:internal" in (journalled.error or "")  # the whole text kept


async def test_a_wait_beyond_the_limit_is_400(h: Harness, http: Http, job: dict[str, object]) -> None:
    await h.block_queue()
    job_id = await submit(http, job)
    answer = await http.get(f"/v1/jobs/{job_id}/proof", params={"wait": 10_000})
    assert answer.status_code == 400
    assert "at most 300" in answer.json()["detail"]


async def test_cancel_answers_the_cancelled_job_and_refuses_a_finished_one(
    h: Harness, http: Http, job: dict[str, object]
) -> None:
    done_id = await submit(http, job, kind="winning-post")
    assert await h.done(done_id) is JobState.DONE
    await h.block_queue()
    job_id = await submit(http, job)
    answer = await http.delete(f"/v1/jobs/{job_id}")
    assert answer.status_code == 200
    assert answer.json()["state"] == "cancelled"
    assert (await http.delete(f"/v1/jobs/{job_id}")).status_code == 200  # cancelling twice is harmless
    answer = await http.delete(f"/v1/jobs/{done_id}")
    assert answer.status_code == 409
    assert "already finished (done)" in answer.json()["detail"]


async def test_mutating_routes_need_the_bearer_token_when_one_is_set(
    h: Harness, job: dict[str, object]
) -> None:
    await h.block_queue()
    async with app_of(h, TOKEN)[1] as http:
        await _needs_the_token(h, http, job)


async def _needs_the_token(h: Harness, http: Http, job: dict[str, object]) -> None:
    missing = await http.post("/v1/jobs", json=job)
    assert missing.status_code == 401
    assert "bearer token" in missing.json()["detail"]
    assert missing.headers["www-authenticate"] == "Bearer"
    wrong = await http.post("/v1/jobs", json=job, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    assert wrong.json()["detail"] == "wrong bearer token"
    basic = await http.post("/v1/jobs", json=job, headers={"Authorization": "Basic abc"})
    assert "malformed" in basic.json()["detail"]
    right = await http.post("/v1/jobs", json=job, headers={"Authorization": f"Bearer {TOKEN}"})
    assert right.status_code == 202
    job_id = right.json()["job_id"]
    assert (await http.delete(f"/v1/jobs/{job_id}")).status_code == 401
    assert h.engine.job(job_id) is not None and h.state(job_id) is JobState.QUEUED  # not cancelled
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


async def test_healthz_and_submit_wait_for_the_engine_to_be_ready(
    engine_config: Callable[..., Config], job: dict[str, object]
) -> None:
    engine = Engine(engine_config(), backend=InProcessBackend())
    app = create_app(engine, api_config(engine.config))
    async with Http(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as http:
        starting = await http.get("/healthz")
        assert starting.status_code == 503
        assert "starting" in starting.json()["reasons"]
        refused = await http.post("/v1/jobs", json=job)
        assert refused.status_code == 503
        assert "starting" in refused.json()["detail"]
        await engine.start()
        try:
            assert (await http.get("/healthz")).json()["ok"] is True
            # An inline sector: the daemon makes the sector folder from the request, then proves it.
            accepted = await http.post("/v1/jobs", json={"kind": "winning-post", "sector": INLINE_SECTOR})
            assert accepted.status_code == 202
            proof = await http.get(f"/v1/jobs/{accepted.json()['job_id']}/proof", params={"wait": WAIT})
            assert proof.status_code == 200
            assert verifies(engine, "winning-post", proof.json()["partitions"][0])
        finally:
            await engine.stop()
        stopped = await http.get("/healthz")
        assert stopped.status_code == 503


async def test_kinds_and_verification_keys(h: Harness, http: Http) -> None:
    kinds = (await http.get("/v1/kinds")).json()
    assert [kind["name"] for kind in kinds] == [
        "porep-c2",
        "snap-update",
        "window-post",
        "winning-post",
        "circom",
    ]
    assert [kind["partitions"] for kind in kinds[:4]] == [10, 16, 1, 1]
    key = (await http.get("/v1/kinds/porep-c2/verification_key")).json()
    assert key == h.engine.verification_key("porep-c2")
    assert (key["protocol"], key["curve"]) == ("groth16", "bn128")
    unknown = await http.get("/v1/kinds/nope/verification_key")
    assert unknown.status_code == 404
    assert "nope" in unknown.json()["detail"]
    circom = await http.get("/v1/kinds/circom/verification_key")
    assert circom.status_code == 400
    assert "?circuit=" in circom.json()["detail"]
    ghost = await http.get("/v1/kinds/circom/verification_key", params={"circuit": "ghost"})
    assert ghost.status_code == 404
    assert "ghost" in ghost.json()["detail"]


async def test_register_a_circuit_then_list_it(h: Harness, circuit_files: tuple[Path, Path]) -> None:
    zkey, _ = circuit_files
    async with app_of(h, TOKEN)[1] as http:
        await _registers(http, zkey)


async def _registers(http: Http, zkey: Path) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    body = {"name": "chain", "zkey": str(zkey)}
    assert (await http.post("/v1/circuits", json=body)).status_code == 401
    answer = await http.post("/v1/circuits", json=body, headers=auth)
    assert answer.status_code == 201, answer.text
    assert (answer.json()["name"], answer.json()["curve"]) == ("chain", "bn128")
    assert answer.json()["has_witness_generator"] is False
    assert [c["name"] for c in (await http.get("/v1/circuits")).json()] == ["chain"]
    key = await http.get("/v1/kinds/circom/verification_key", params={"circuit": "chain"})
    assert key.status_code == 200 and key.json()["protocol"] == "groth16"
    nope = str(zkey.parent / "nope.zkey")  # in a folder the daemon may read
    missing = await http.post("/v1/circuits", json={"name": "x", "zkey": nope}, headers=auth)
    assert missing.status_code == 422
    assert nope in missing.json()["detail"]
    garbage = zkey.parent / "garbage.zkey"
    garbage.write_bytes(b"this is not a zkey\n")
    not_a_key = await http.post("/v1/circuits", json={"name": "x", "zkey": str(garbage)}, headers=auth)
    assert not_a_key.status_code == 422
    outside = await http.post("/v1/circuits", json={"name": "x", "zkey": str(Path(__file__))}, headers=auth)
    assert outside.status_code == 403
    assert [c["name"] for c in (await http.get("/v1/circuits")).json()] == ["chain"]


async def test_status_is_the_trackers_snapshot(h: Harness, http: Http, job: dict[str, object]) -> None:
    await h.block_queue()
    job_id = await submit(http, job)
    snapshot = (await http.get("/status")).json()
    own = h.engine.snapshot()
    assert (snapshot["boot_id"], snapshot["seq"], snapshot["invariants_ok"]) == (own.boot_id, own.seq, True)
    assert [(p["job_id"], p["proof_kind"], p["state"]) for p in snapshot["pipelines"]][-1] == (
        job_id,
        "porep-c2",
        "queued",
    )
    assert [w["worker_id"] for w in snapshot["workers"]] == ["cpu:0/w0"]


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


@pytest.mark.parametrize("host", ["127.0.0.1:9821", "localhost:9821", "[::1]:9821", "10.0.0.5", "LOCALHOST"])
async def test_a_host_that_names_this_machine_is_served(http: Http, host: str) -> None:
    assert (await http.get("/healthz", headers={"Host": host})).status_code in (200, 503)


@pytest.mark.parametrize("host", ["evil.example", "evil.example:9821", "127.0.0.1.evil.example"])
async def test_a_foreign_host_is_refused_before_any_route_runs(http: Http, host: str) -> None:
    """DNS rebinding: a hostile page's own name pointed at 127.0.0.1 reaches a loopback daemon, and says so
    in its Host header."""
    for method, path in (("GET", "/status"), ("GET", "/healthz"), ("POST", "/v1/jobs")):
        answer = await http.request(method, path, headers={"Host": host}, json={})
        assert answer.status_code == 421 and "allowed_hosts" in answer.json()["detail"], (method, path)


async def test_a_configured_host_name_is_served(h: Harness) -> None:
    config = dataclasses.replace(h.engine.config, allowed_hosts=("prover1.lan",))
    async with Http(transport=httpx.ASGITransport(app=create_app(h.engine, config)),
                    base_url="http://prover1.lan:9821") as client:  # fmt: skip
        assert (await client.get("/healthz")).status_code in (200, 503)


async def test_a_page_of_another_origin_cannot_change_anything(
    h: Harness, http: Http, job: dict[str, object]
) -> None:
    await h.block_queue()
    refused = await http.post("/v1/jobs", json=job, headers={"Origin": "http://evil.example"})
    assert refused.status_code == 403 and "evil.example" in refused.json()["detail"]
    assert (await http.post("/v1/jobs", json=job, headers={"Origin": "null"})).status_code == 403
    own = await http.post("/v1/jobs", json=job, headers={"Origin": "http://127.0.0.1"})  # its own page
    assert own.status_code == 202, own.text
    assert (await http.get("/status", headers={"Origin": "http://evil.example"})).status_code == 200


async def test_a_json_body_sent_as_a_form_or_text_is_refused(http: Http, job: dict[str, object]) -> None:
    """What a cross-site form (text/plain, no preflight) would send: never taken as a request."""
    for kind in ("text/plain", "application/x-www-form-urlencoded"):
        answer = await http.post("/v1/jobs", content=json.dumps(job), headers={"Content-Type": kind})
        assert answer.status_code == 422, (kind, answer.text)


async def test_docs_lists_every_route_and_loads_nothing_from_elsewhere(http: Http) -> None:
    page = await http.get("/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    spec = (await http.get("/openapi.json")).json()
    for path, operations in spec["paths"].items():
        for method in operations:
            assert f"{method.upper()}</span> {html.escape(path)}</h2>" in page.text, (method, path)
    # Works without internet: no script, style sheet or image from another host (the Swagger UI did).
    assert not re.search(r"""(src|href)=['"]?(https?:)?//""", page.text)
    assert "<script" not in page.text


@pytest.mark.skipif(not (DASHBOARD / "index.html").exists(), reason="dashboard not built in")
async def test_the_dashboard_is_served_at_the_root(http: Http) -> None:
    page = await http.get("/")
    assert page.status_code == 200
    assert "<html" in page.text.lower()
    assert (await http.get("/no-such-file.js")).status_code == 404


async def collect(engine: Engine, resume: int | str | None, count: int) -> list[str]:
    """Run the SSE generator until ``count`` frames (the greeting included) came out."""
    frames: list[str] = []
    stream = event_stream(engine, None if resume is None else str(resume), 60.0, asyncio.Event())
    async for chunk in stream:  # a write carries every event ready at once: split it into frames
        frames += [frame + "\n\n" for frame in chunk.split("\n\n") if frame]
        if len(frames) >= count:
            break
    await stream.aclose()
    return frames[:count]


async def test_events_are_framed_with_ids_and_names(h: Harness) -> None:
    await h.block_queue()
    seq = h.engine.snapshot().seq
    job_id = await h.submit("porep-c2")
    frames = await collect(h.engine, seq, 2)
    assert frames[0].startswith(": prooflane event stream\nretry: 1000")
    head, name, data, *end = frames[1].split("\n")
    boot = h.engine.boot_id
    assert (head, name, end) == (f"id: {boot}:{seq + 1}", "event: job_submitted", ["", ""])
    assert data.startswith("data: {")
    assert json.loads(data.removeprefix("data: "))["job_id"] == job_id


async def test_events_resume_after_the_last_event_id_without_a_gap(h: Harness) -> None:
    await h.block_queue()
    for _ in range(3):
        await h.submit("porep-c2")
    last = h.engine.snapshot().seq
    frames = await collect(h.engine, last - 3, 4)
    boot = h.engine.boot_id
    assert [f.split("\n")[:2] for f in frames[1:]] == [
        [f"id: {boot}:{n}", "event: job_submitted"] for n in (last - 2, last - 1, last)
    ]
    again = await collect(h.engine, f"{boot}:{last - 1}", 2)  # the id as the stream gave it
    assert again[1].startswith(f"id: {boot}:{last}\nevent: job_submitted")


async def test_an_event_id_of_another_boot_resyncs_whatever_its_number(h: Harness) -> None:
    """After a restart the numbers start again: an id of the old boot that is still "valid" in the new one
    must not continue there (events of the new boot before it would be lost without a word)."""
    await h.block_queue()
    for _ in range(3):
        await h.submit("porep-c2")
    last = h.engine.snapshot().seq
    frames = await collect(h.engine, f"an-earlier-boot:{last - 2}", 2)
    head, name, data, *_ = frames[1].split("\n")
    assert (head, name) == (f"id: {h.engine.boot_id}:{last}", "event: resync")
    assert json.loads(data.removeprefix("data: "))["seq"] == last


async def test_events_that_arrive_later_are_streamed_too(h: Harness) -> None:
    await h.block_queue()
    stream = event_stream(h.engine, None, 0.01, asyncio.Event())  # None: from now on
    try:
        assert (await anext(stream)).startswith(": prooflane event stream")
        # A heartbeat comes only while the stream waits on the engine's feed: it is attached from then on.
        assert await anext(stream) == HEARTBEAT
        seq = h.engine.snapshot().seq
        await h.submit("porep-c2")
        frame = HEARTBEAT
        while frame == HEARTBEAT:
            frame = await anext(stream)
        assert frame.startswith(f"id: {h.engine.boot_id}:{seq + 1}\nevent: job_submitted\n")
    finally:
        await stream.aclose()


async def test_events_send_heartbeats_while_nothing_happens_and_end_on_close(h: Harness) -> None:
    closing = asyncio.Event()
    frames = []
    async for frame in event_stream(h.engine, None, 0.01, closing):
        frames.append(frame)
        if len(frames) == 3:
            closing.set()
    assert frames[1:] == [HEARTBEAT, HEARTBEAT]


async def test_a_bad_last_event_id_is_400(http: Http) -> None:
    answer = await http.get("/v1/events", headers={"Last-Event-ID": "abc"})
    assert answer.status_code == 400
    assert "abc" in answer.json()["detail"]


async def test_close_streams_ends_open_event_streams(h: Harness) -> None:
    app, _ = app_of(h)
    close_streams(app)
    assert app.state.closing.is_set()


async def test_settings_come_from_the_config(engine_config: Callable[..., Config]) -> None:
    settings = ApiSettings.from_config(api_config(engine_config(), "tok"))
    assert settings.tokens.granted == (("tok", "admin"),)
    assert settings.max_body_bytes == 4096
    assert not ApiSettings.from_config(api_config(engine_config(), "")).tokens.enabled


async def test_head_status_and_healthz_answer_without_a_body(http: Http) -> None:
    for path in ("/status", "/healthz"):
        answer = await http.head(path)
        assert answer.status_code == 200
        assert answer.content == b""


async def test_head_is_answered_wherever_get_is_with_its_status_and_headers(
    h: Harness, http: Http, job: dict[str, object]
) -> None:
    """HEAD on the API's routes once answered 404 (the dashboard's files caught it): RFC 9110 says a server
    that answers GET on a resource answers HEAD too, with the GET's status and headers and no body."""
    job_id = await submit(http, job)
    for path in ("/v1/jobs", f"/v1/jobs/{job_id}", "/v1/kinds", "/v1/circuits", "/metrics", "/openapi.json",
                 "/v1/jobs/no-such-job", "/"):  # fmt: skip
        got, head = await http.get(path), await http.head(path)
        assert head.status_code == got.status_code, path
        assert head.content == b"", path
        assert head.headers.get("content-type") == got.headers.get("content-type"), path
        if path in ("/v1/kinds", "/openapi.json", "/"):  # the same bytes at each read
            assert head.headers["content-length"] == got.headers["content-length"], path


async def test_405_names_the_methods_the_route_takes(http: Http) -> None:
    answer = await http.delete("/status")
    assert answer.status_code == 405
    assert answer.headers["allow"] == "GET, HEAD"
    answer = await http.put("/v1/jobs/abc")
    assert answer.status_code == 405
    assert answer.headers["allow"] == "DELETE, GET, HEAD"


async def test_a_job_id_with_a_trailing_newline_is_refused(
    h: Harness, http: Http, job: dict[str, object]
) -> None:
    answer = await http.post("/v1/jobs", json=job | {"job_id": "abc\n"})
    assert answer.status_code == 422
    assert "job_id" in answer.json()["detail"]
    assert h.engine.jobs() == []


async def test_deeply_nested_circuit_inputs_are_refused(http: Http) -> None:
    nested: dict[str, object] = {}
    cur = nested
    for _ in range(256):
        cur["a"] = {}
        cur = cur["a"]  # type: ignore[assignment]
    answer = await http.post("/v1/jobs", json={"kind": "circom", "circuit": "c", "witnesses": [nested]})
    assert answer.status_code == 422
    assert "levels deep" in answer.json()["detail"]


async def test_a_long_poll_open_at_shutdown_gets_202_at_once(
    h: Harness, monkeypatch: pytest.MonkeyPatch, job: dict[str, object]
) -> None:
    await h.block_queue()
    app, client = app_of(h)
    waiting = asyncio.Event()
    on_long_poll(monkeypatch, h.engine, waiting.set)
    async with client:
        job_id = await submit(client, job)
        poll = asyncio.create_task(client.get(f"/v1/jobs/{job_id}/proof", params={"wait": 250}))
        await waiting.wait()  # the request waits inside the engine
        close_streams(app)
        answer = await poll
        assert answer.status_code == 202
        assert (answer.json()["job_id"], answer.json()["state"]) == (job_id, "queued")


async def test_a_job_view_lists_its_partitions_a_page_at_a_time(
    h: Harness, http: Http, job: dict[str, object]
) -> None:
    await h.block_queue()
    job_id = await submit(http, {**job, "kind": "porep-c2"})
    answer = await http.get(f"/v1/jobs/{job_id}")
    assert "link" not in answer.headers  # all of it on one page
    whole = answer.json()
    total = whole["total_partitions"]
    assert len(whole["partitions"]) == total > 3
    first = await http.get(f"/v1/jobs/{job_id}", params={"partitions_limit": 3})
    assert [p["index"] for p in first.json()["partitions"]] == [0, 1, 2]
    assert first.json()["total_partitions"] == total
    seen = [p["index"] for p in first.json()["partitions"]]
    link = first.headers["link"]
    while link:
        url = link.split(">", 1)[0].lstrip("<")
        page = await http.get(url)
        seen += [p["index"] for p in page.json()["partitions"]]
        link = page.headers.get("link", "")
    assert seen == list(range(total))
    assert (
        "link" not in whole
        and (await http.get(f"/v1/jobs/{job_id}", params={"partitions_limit": 0})).status_code == 422
    )
