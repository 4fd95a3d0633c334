"""Scoped tokens on the daemon: every route either needs a scope (read < submit < admin) or is open, and
each scope's token passes exactly the routes of its scope and those below it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import httpx
import pytest
from fastapi.routing import APIRoute

from prooflane.config import Config
from prooflane.errors import ConfigError
from prooflane.server.api import create_app
from tests.support.engine import Harness

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]
TOKENS = {"read": "rd-token", "submit": "sb-token", "admin": "ad-token"}
SCOPES = ("read", "submit", "admin")
# Each route that needs a token: its scope, and a request past the check (its answer is then not 401/403).
SCOPED = {
    ("GET", "/v1/logs"): "read",
    ("POST", "/v1/jobs"): "submit",
    ("DELETE", "/v1/jobs/{job_id}"): "submit",
    ("POST", "/v1/circuits/{name}/jobs"): "submit",
    ("POST", "/v1/circuits"): "admin",
    ("PUT", "/v1/circuits/{name}"): "admin",
}
OPEN = {
    ("GET", "/v1/jobs"), ("GET", "/v1/jobs/{job_id}"), ("GET", "/v1/jobs/{job_id}/proof"),
    ("GET", "/v1/kinds"), ("GET", "/v1/kinds/{kind}/verification_key"), ("GET", "/v1/circuits"),
    ("GET", "/status"), ("GET", "/v1/events"), ("GET", "/metrics"), ("GET", "/healthz"),
    ("GET", "/docs"),
}  # fmt: skip


async def test_every_route_is_scoped_or_open(h: Harness) -> None:
    app = create_app(h.engine, dataclasses.replace(h.engine.config, token=TOKENS["admin"]))
    routes = {
        (m, r.path) for r in app.routes if isinstance(r, APIRoute) for m in (r.methods or set()) - {"HEAD"}
    }
    assert routes == set(SCOPED) | OPEN


async def test_each_token_passes_its_scope_and_those_below(h: Harness, sector: Path) -> None:
    config = dataclasses.replace(
        h.engine.config, token="", read_tokens=(TOKENS["read"],), submit_tokens=(TOKENS["submit"],),
        admin_tokens=(TOKENS["admin"],),
    )  # fmt: skip
    app = create_app(h.engine, config)
    await h.block_queue()
    requests = {
        ("GET", "/v1/logs"): {"url": "/v1/logs"},
        ("POST", "/v1/jobs"): {"url": "/v1/jobs", "json": {"kind": "winning-post", "sector": str(sector)}},
        ("DELETE", "/v1/jobs/{job_id}"): {"url": "/v1/jobs/no-such-job"},
        ("POST", "/v1/circuits/{name}/jobs"): {"url": "/v1/circuits/c/jobs", "content": b"x"},
        ("POST", "/v1/circuits"): {"url": "/v1/circuits", "json": {}},
        ("PUT", "/v1/circuits/{name}"): {"url": "/v1/circuits/c", "content": b"x"},
    }
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        for (method, route), needs in SCOPED.items():
            asked = requests[(method, route)]
            for given in (None, "wrong", *SCOPES):
                headers = {} if given is None else {"Authorization": f"Bearer {TOKENS.get(given, given)}"}
                answer = await http.request(method, **asked, headers=headers)  # type: ignore[arg-type]
                said = f"{method} {route} with {given}: {answer.status_code} {answer.text}"
                if given is None or given == "wrong":
                    assert answer.status_code == 401, said
                elif SCOPES.index(given) < SCOPES.index(needs):
                    assert answer.status_code == 403, said
                    assert answer.json()["detail"] == (
                        f"this token's scope is {given}: this route needs {needs} or higher"
                    ), said
                else:
                    assert answer.status_code not in (401, 403), said


@pytest.mark.parametrize(
    ("keys", "says"),
    [
        ({"read_tokens": ["a\r\nb"]}, "key 'read_tokens': a token holds '\\r'"),
        ({"token": "t", "submit_tokens": ["t"]}, "key 'submit_tokens': a token is given twice"),
        ({"admin_tokens": [""]}, "key 'admin_tokens': expected tokens, not an empty string"),
    ],
)
def test_tokens_are_checked_at_load(keys: dict[str, object], says: str) -> None:
    with pytest.raises(ConfigError) as refused:
        Config.from_dict(dict(keys))
    assert says in str(refused.value)
