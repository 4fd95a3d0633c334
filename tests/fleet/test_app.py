"""The fleet's HTTP side behind the daemon's own checks: Host and Origin (DNS rebinding, other pages), HEAD
wherever GET is, and the body limit; the fleet's streams counted by the daemon's server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from prooflane.config import Config
from prooflane.fleet import Fleet, create_fleet_app
from prooflane.fleet import app as fleet_app
from prooflane.fleet.app import holds_open
from prooflane.fleet.config import DaemonSpec, FleetConfig
from tests.support.engine import served

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]
TOKEN = "fleet-token"


@pytest.fixture
async def fleet_of(tmp_path: Path) -> AsyncIterator[Callable[[FleetConfig], Fleet]]:
    fleets: list[Fleet] = []

    def make(config: FleetConfig) -> Fleet:
        fleet = Fleet(config, tmp_path / "fleet.toml")
        fleets.append(fleet)
        return fleet

    yield make
    for fleet in fleets:
        await fleet.close()


def _client(fleet: Fleet, host: str = "127.0.0.1:9830") -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=create_fleet_app(fleet))
    return httpx.AsyncClient(transport=transport, base_url=f"http://{host}")


async def test_a_rebound_host_cannot_read_the_daemons_logs_through_the_fleet(
    engine_config: Callable[..., Config], sector: Path, fleet_of: Callable[[FleetConfig], Fleet]
) -> None:
    """`GET /fleet/logs` with `Host: evil.example` once returned a daemon's log lines (which that daemon
    gives only with its token): a page whose name was rebound to the fleet's address could read them."""
    config = engine_config()
    assert config.log_file is not None
    config.log_file.parent.mkdir(parents=True, exist_ok=True)
    config.log_file.write_text("secret line\n")
    with served(config, token="daemon-token", sector=sector) as live:
        spec = DaemonSpec(name="a", url=live.url, token="daemon-token")
        fleet = fleet_of(FleetConfig(port=0, token=TOKEN, daemons=(spec,), allowed_hosts=("fleet.lan",)))
        await fleet.start()
        async with _client(fleet, "evil.example") as hostile:
            for path in ("/fleet/logs", "/fleet/daemons/a/logs", "/fleet/status", "/"):
                answer = await hostile.get(path)
                assert answer.status_code == 421, (path, answer.text)
                assert "secret" not in answer.text and "allowed_hosts" in answer.json()["detail"]
        for host in ("127.0.0.1:9830", "localhost", "fleet.lan:9830", "[::1]:9830"):
            async with _client(fleet, host) as own:
                answer = await own.get("/fleet/logs")
                assert answer.status_code == 200, (host, answer.text)
                assert answer.json()["daemons"]["a"]["lines"] == ["secret line"]


async def test_a_page_of_another_origin_cannot_change_the_fleet(
    fleet_of: Callable[[FleetConfig], Fleet],
) -> None:
    fleet = fleet_of(FleetConfig(port=0, token=TOKEN))
    auth = {"Authorization": f"Bearer {TOKEN}"}
    body = {"name": "x", "url": "http://127.0.0.1:1"}
    async with _client(fleet) as client:
        other = await client.post(
            "/fleet/daemons", json=body, headers={**auth, "Origin": "http://evil.example"}
        )
        assert other.status_code == 403 and "evil.example" in other.json()["detail"]
        assert "x" not in fleet.followers
        own = await client.post(
            "/fleet/daemons", json=body, headers={**auth, "Origin": "http://127.0.0.1:9830"}
        )
        assert own.status_code == 201, own.text


async def test_head_is_answered_wherever_get_is(fleet_of: Callable[[FleetConfig], Fleet]) -> None:
    fleet = fleet_of(FleetConfig(port=0))
    async with _client(fleet) as client:
        for path in ("/healthz", "/fleet/status", "/fleet/circuits", "/", "/assets/style.css", "/nope"):
            got, head = await client.get(path), await client.head(path)
            assert head.status_code == got.status_code, path
            assert head.content == b"" and head.headers.get("content-type") == got.headers.get("content-type")


async def test_a_body_over_max_request_bytes_is_413(fleet_of: Callable[[FleetConfig], Fleet]) -> None:
    fleet = fleet_of(FleetConfig(port=0, token=TOKEN, max_request_bytes=1024))
    auth = {"Authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
    async with _client(fleet) as client:
        answer = await client.post("/fleet/daemons", content=b" " * 2048, headers=auth)
        assert answer.status_code == 413


def test_the_relayed_event_streams_are_the_fleets_streams() -> None:
    assert holds_open({"path": "/d/gpu-1/v1/events"})
    assert not holds_open({"path": "/fleet/status"}) and not holds_open({"path": "/d/gpu-1/status"})


def test_the_fleet_serves_every_file_of_the_dashboard() -> None:
    dashboard = Path(__file__).resolve().parents[2] / "src" / "prooflane" / "dashboard"
    served_files = {p.name for p in dashboard.iterdir() if p.is_file() and p.name != "index.html"}
    assert set(fleet_app._DASHBOARD_ASSETS) == served_files


FLEET_SCOPES = ("view", "manage", "deploy")
FLEET_TOKENS = {"view": "fv-token", "manage": "fm-token", "deploy": "fd-token"}
# Each fleet route that needs a token, its scope, and a request that passes the check (then not 401/403).
FLEET_SCOPED: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {
    ("GET", "/fleet/logs"): ("view", {}),
    ("GET", "/fleet/daemons/{name}/logs"): ("view", {"url": "/fleet/daemons/nobody/logs"}),
    ("POST", "/fleet/daemons"): ("manage", {"json": []}),
    ("DELETE", "/fleet/daemons/{name}"): ("manage", {"url": "/fleet/daemons/nobody"}),
    ("POST", "/fleet/daemons/{name}/stop"): ("manage", {"url": "/fleet/daemons/nobody/stop"}),
    ("POST", "/fleet/daemons/{name}/restart"): ("manage", {"url": "/fleet/daemons/nobody/restart"}),
    ("POST", "/fleet/daemons/{name}/jobs"): ("manage", {"url": "/fleet/daemons/nobody/jobs", "json": {}}),
    ("PUT", "/fleet/circuits/{name}"): ("manage", {"url": "/fleet/circuits/c", "content": b"x"}),
    ("POST", "/fleet/daemons/{name}/deploy"): ("deploy", {"url": "/fleet/daemons/d/deploy", "json": []}),
}
FLEET_OPEN = {
    ("GET", p) for p in ("/fleet/status", "/fleet/metrics", "/healthz", "/fleet/circuits", "/d/{name}/",
                         "/d/{name}/status", "/d/{name}/v1/events", "/d/{name}/metrics", "/d/{name}/v1/jobs",
                         "/d/{name}/v1/jobs/{job_id}", "/d/{name}/v1/jobs/{job_id}/proof",
                         "/assets/{asset}", "/d/{name}/{asset}", "/docs")
}  # fmt: skip


async def test_every_fleet_route_is_scoped_or_open_and_each_token_passes_its_scope_and_below(
    fleet_of: Callable[[FleetConfig], Fleet],
) -> None:
    from fastapi.routing import APIRoute

    config = FleetConfig(port=0, view_tokens=(FLEET_TOKENS["view"],), manage_tokens=(FLEET_TOKENS["manage"],),
                         deploy_tokens=(FLEET_TOKENS["deploy"],))  # fmt: skip
    fleet = fleet_of(config)
    app = create_fleet_app(fleet)
    routes = {
        (m, r.path) for r in app.routes if isinstance(r, APIRoute) for m in (r.methods or set()) - {"HEAD"}
    }
    assert routes == set(FLEET_SCOPED) | FLEET_OPEN
    async with _client(fleet) as client:
        for (method, route), (needs, asked) in FLEET_SCOPED.items():
            url = asked.get("url", route)
            for given in (None, "wrong", *FLEET_SCOPES):
                headers = (
                    {} if given is None else {"Authorization": f"Bearer {FLEET_TOKENS.get(given, given)}"}
                )
                extra = {k: v for k, v in asked.items() if k != "url"}
                answer = await client.request(method, url, headers=headers, **extra)
                said = f"{method} {route} with {given}: {answer.status_code} {answer.text}"
                if given is None or given == "wrong":
                    assert answer.status_code == 401, said
                elif FLEET_SCOPES.index(given) < FLEET_SCOPES.index(needs):
                    assert answer.status_code == 403, said
                    scope = f"this token's scope is {given}: this route needs {needs} or higher"
                    assert answer.json()["detail"] == f"{scope} (the fleet's token)", said
                else:
                    assert answer.status_code not in (401, 403), said


async def test_without_view_tokens_the_logs_are_read_as_the_status_is(
    fleet_of: Callable[[FleetConfig], Fleet],
) -> None:
    fleet = fleet_of(FleetConfig(port=0, token=TOKEN))
    async with _client(fleet) as client:
        assert (await client.get("/fleet/logs")).status_code == 200
        no_token = fleet_of(FleetConfig(port=0))
        async with _client(no_token) as open_fleet:
            refused = await open_fleet.post("/fleet/daemons/a/jobs", json={})
            assert refused.status_code == 403 and "sets no token" in refused.json()["detail"]
