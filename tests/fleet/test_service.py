"""The fleet service over real HTTP: daemons (the real engine on the in-process backend behind the daemon's
app, served by uvicorn), a socket that never answers, and the fleet's own routes. The end-to-end tests with
daemon processes are in test_e2e_fleet.py."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import tomllib
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from prooflane.config import Config
from prooflane.fleet import Fleet, create_fleet_app
from prooflane.fleet.config import DaemonSpec, FleetConfig
from prooflane.states import JobState
from prooflane.status.ages import advance
from tests.support.clock import ManualClock
from tests.support.engine import Served, served

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]
TOKEN = "fleet-token"
WAIT_SECS = 30.0  # how long any one wait may take before the test fails (never asserted as a timing)


@pytest.fixture
def daemon(engine_config: Callable[..., Config], sector: Path) -> Iterator[Served]:
    """A daemon whose engine clock moves only when told: between two events, its ``/status`` is the same
    at every read but for the moment of reading (``MOMENT``)."""
    with served(engine_config(), clock=ManualClock(), sector=sector) as live:
        yield live


@pytest.fixture
def silent() -> Iterator[str]:
    """A listening socket that accepts connections (the kernel does) and never reads or answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def _config(*daemons: DaemonSpec, token: str = TOKEN) -> FleetConfig:
    return FleetConfig(
        port=0, token=token, poll_secs=0.1, timeout_secs=0.5, stale_after_secs=3.0, backoff_max_secs=0.4,
        daemons=daemons,
    )  # fmt: skip


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[Callable[[FleetConfig], Fleet]]:
    """Start fleets (saving to tmp_path/fleet.toml) and close them after the test."""
    fleets: list[Fleet] = []

    def start(config: FleetConfig) -> Fleet:
        fleet = Fleet(config, tmp_path / "fleet.toml")
        fleets.append(fleet)
        return fleet

    yield start
    for fleet in fleets:
        await fleet.close()


def _entry(fleet: Fleet, name: str) -> dict[str, Any]:
    (found,) = [e for e in fleet.status()["daemons"] if e["name"] == name]
    entry: dict[str, Any] = found
    return entry


# Fields of /status that say when it was read (wall clock, the process's memory), not what the daemon did.
MOMENT = ("taken_at", "process_rss_bytes")


def _at_seq(snapshot: dict[str, Any]) -> dict[str, Any]:
    """The snapshot without the fields of the moment it was read."""
    memory = {k: v for k, v in snapshot["memory"].items() if k not in MOMENT}
    return {k: v for k, v in snapshot.items() if k not in MOMENT} | {"memory": memory}


async def _own_status(daemon: Served) -> dict[str, Any]:
    """The daemon's own ``GET /status``, asked directly."""
    async with httpx.AsyncClient() as direct:
        snapshot: dict[str, Any] = (await direct.get(f"{daemon.url}/status")).json()
        return snapshot


async def _holds_own_status(fleet: Fleet, name: str, daemon: Served) -> None:
    """Wait until the fleet holds the daemon's own ``/status`` of now (same boot, same seq), then check that
    it is that document."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_SECS
    while True:
        own, held = await _own_status(daemon), _entry(fleet, name)["snapshot"]
        if held is not None and (held["boot_id"], held["seq"]) == (own["boot_id"], own["seq"]):
            # Told 304, the fleet moved its copy on by its own clock's time since it came (the daemon's
            # stands still here): that copy is the daemon's own document moved on by as much.
            moved = held["uptime_secs"] - own["uptime_secs"]
            assert _at_seq(held) == _at_seq(advance(own, moved))
            return
        if loop.time() > deadline:
            pytest.fail(f"gave up waiting for the fleet to hold {name}'s status at seq {own['seq']}")
        await asyncio.sleep(0.02)


async def _until(what: str, check: Callable[[], bool]) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_SECS
    while not check():
        if loop.time() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        await asyncio.sleep(0.02)


async def test_fleet_holds_the_daemons_own_status_and_follows_its_events(
    daemon: Served, sector: Path, running: Callable[[FleetConfig], Fleet]
) -> None:
    proving = daemon.hold(lambda s: s.name == "prove_start")
    daemon.submit("winning-post")
    daemon.reached(proving)  # the worker holds the job's lease: it is proving
    fleet = running(_config(DaemonSpec(name="a", url=daemon.url)))
    await fleet.start()
    await _until("a to be up on its event stream", lambda: _entry(fleet, "a")["feed"] == "events")
    await _holds_own_status(fleet, "a", daemon)
    entry = _entry(fleet, "a")
    assert entry["health"] == "up" and entry["reachable"] and entry["fresh"]
    assert entry["summary"]["workers_proving"] == 1 and entry["summary"]["devices_busy"] == 1
    seq = entry["snapshot"]["seq"]
    daemon.hold()  # every synthesis waits: each job below is a few events, then nothing moves
    jobs = [daemon.submit("porep-c2") for _ in range(3)]
    await _holds_own_status(fleet, "a", daemon)
    held = _entry(fleet, "a")["snapshot"]
    assert held["seq"] > seq
    assert [p["job_id"] for p in held["pipelines"]][-3:] == jobs
    # Nothing moves now: the polls are answered 304 (but after a journal check, every 5 s), and the
    # fleet counts them with the bytes they carried
    before = _entry(fleet, "a")["following"]
    await _until("some polls answered 304", lambda: _entry(fleet, "a")["following"]["status_not_modified"]
                 >= before["status_not_modified"] + 3)  # fmt: skip
    after = _entry(fleet, "a")["following"]
    assert (
        after["status_fetches"] > before["status_fetches"] and after["status_bytes"] >= before["status_bytes"]
    )
    await _holds_own_status(fleet, "a", daemon)


async def test_a_daemon_that_never_answers_does_not_hold_up_the_others(
    daemon: Served, silent: str, running: Callable[[FleetConfig], Fleet]
) -> None:
    daemon.block_queue()
    fleet = running(_config(DaemonSpec(name="hung", url=silent), DaemonSpec(name="a", url=daemon.url)))
    await fleet.start()
    await _until("hung to be unreachable", lambda: _entry(fleet, "hung")["health"] == "unreachable")
    assert _entry(fleet, "hung")["last_error"] == "no answer in time"
    assert _entry(fleet, "hung")["snapshot"] is None and _entry(fleet, "hung")["summary"] is None
    # Meanwhile the other daemon's row keeps up with every change.
    for _ in range(3):
        job_id = daemon.submit("porep-c2")
        await _holds_own_status(fleet, "a", daemon)
        assert [p["job_id"] for p in _entry(fleet, "a")["snapshot"]["pipelines"]][-1] == job_id
        assert _entry(fleet, "a")["health"] == "up"
    assert fleet.health() == {"ok": True, "version": fleet.status()["version"], "daemons": 2, "reachable": 1,
                              "up": 1, "unreachable": ["hung"], "ssh_masters": 0}  # fmt: skip
    totals = fleet.status()["totals"]
    assert totals["counted"] == ["a"] and totals["not_counted"] == ["hung"]


async def test_a_stopped_daemon_turns_unreachable_and_keeps_its_last_snapshot(
    engine_config: Callable[..., Config], running: Callable[[FleetConfig], Fleet]
) -> None:
    with served(engine_config()) as daemon:
        fleet = running(_config(DaemonSpec(name="a", url=daemon.url)))
        await fleet.start()
        await _until("a up", lambda: _entry(fleet, "a")["health"] == "up")
        last = _entry(fleet, "a")["snapshot"]
    await _until("a unreachable", lambda: _entry(fleet, "a")["health"] == "unreachable")
    entry = _entry(fleet, "a")
    assert entry["snapshot"] == last
    assert entry["snapshot_age_secs"] > 0 and not entry["fresh"]
    assert entry["last_error"]


async def _http(fleet: Fleet) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=create_fleet_app(fleet))
    return httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1")  # a Host the fleet allows


async def test_daemons_are_added_and_removed_at_run_time_and_saved(
    daemon: Served, tmp_path: Path, running: Callable[[FleetConfig], Fleet]
) -> None:
    path = tmp_path / "fleet.toml"
    path.write_text(f'token = "{TOKEN}"\npoll_secs = 0.1\n')
    fleet = running(FleetConfig.load(path, port=0))
    await fleet.start()
    auth = {"Authorization": f"Bearer {TOKEN}"}
    body = {"name": "a", "url": daemon.url, "cost_per_hour": 1.25}
    async with await _http(fleet) as http:
        assert (await http.post("/fleet/daemons", json=body)).status_code == 401
        bad = {"Authorization": "Bearer nope"}
        assert (await http.post("/fleet/daemons", json=body, headers=bad)).status_code == 401
        added = await http.post("/fleet/daemons", json=body, headers=auth)
        assert added.status_code == 201, added.text
        assert (await http.post("/fleet/daemons", json=body, headers=auth)).status_code == 409
        wrong = await http.post("/fleet/daemons", json={"name": "b"}, headers=auth)
        assert wrong.status_code == 422 and "exactly one of url, ssh" in wrong.json()["detail"]
        saved = tomllib.loads(path.read_text())
        assert saved["daemons"] == [body]
        assert "port" not in saved  # the command line's --port is not written into the file
        assert saved["poll_secs"] == 0.1
        await _until("a up", lambda: _entry(fleet, "a")["health"] == "up")
        assert (await http.get("/fleet/status")).json()["daemons"][0]["cost_per_hour"] == 1.25

        assert (await http.delete("/fleet/daemons/a")).status_code == 401
        assert (await http.delete("/fleet/daemons/a", headers=auth)).status_code == 200
        assert (await http.delete("/fleet/daemons/a", headers=auth)).status_code == 404
        assert tomllib.loads(path.read_text()).get("daemons", []) == []
        assert (await http.get("/fleet/status")).json()["daemons"] == []


async def test_a_daemon_added_to_the_file_by_hand_is_kept_and_followed(
    daemon: Served, tmp_path: Path, running: Callable[[FleetConfig], Fleet]
) -> None:
    path = tmp_path / "fleet.toml"
    path.write_text(f'token = "{TOKEN}"\npoll_secs = 0.1\n')
    fleet = running(FleetConfig.load(path, port=0))
    await fleet.start()
    with path.open("a") as file:  # the operator edits the file while the fleet runs
        file.write(f'\n[[daemons]]\nname = "by-hand"\nurl = "{daemon.url}"\n')
    auth = {"Authorization": f"bearer {TOKEN}"}  # the scheme in any case, as the daemon takes it
    async with await _http(fleet) as http:
        added = await http.post("/fleet/daemons", json={"name": "api", "url": daemon.url}, headers=auth)
        assert added.status_code == 201, added.text
        again = await http.post("/fleet/daemons", json={"name": "by-hand", "url": daemon.url}, headers=auth)
        assert again.status_code == 409
    assert [d["name"] for d in tomllib.loads(path.read_text())["daemons"]] == ["by-hand", "api"]
    await _until("both up", lambda: {_entry(fleet, n)["health"] for n in ("by-hand", "api")} == {"up"})


async def test_without_a_token_the_daemon_list_cannot_change(running: Callable[[FleetConfig], Fleet]) -> None:
    fleet = running(_config(token=""))
    async with await _http(fleet) as http:
        answer = await http.post("/fleet/daemons", json={"name": "a", "url": "http://127.0.0.1:1"})
        assert answer.status_code == 403 and "token" in answer.json()["detail"]


async def test_daemon_panel_is_the_dashboard_fed_by_the_fleet(
    daemon: Served, silent: str, running: Callable[[FleetConfig], Fleet]
) -> None:
    assert daemon.done(daemon.submit("winning-post")) is JobState.DONE  # a job in the daemon's journal
    fleet = running(_config(DaemonSpec(name="a", url=daemon.url), DaemonSpec(name="hung", url=silent)))
    await fleet.start()
    await _until("a up", lambda: _entry(fleet, "a")["health"] == "up")
    await _until("hung unreachable", lambda: _entry(fleet, "hung")["health"] == "unreachable")
    async with await _http(fleet) as http:
        page = await http.get("/d/a/")
        assert page.status_code == 200 and 'data-daemon="daemon a, through the fleet"' in page.text
        assert (await http.get("/d/a/app.js")).status_code == 200
        assert (await http.get("/d/a/../../etc/passwd")).status_code == 404
        assert (await http.get("/d/a/status")).json() == _entry(fleet, "a")["snapshot"]
        down = await http.get("/d/hung/status")
        assert down.status_code == 503 and "unreachable" in down.json()["detail"]
        jobs = await http.get("/d/a/v1/jobs", params={"state": "done"})
        assert jobs.status_code == 200 and [j["kind"] for j in jobs.json()] == ["winning-post"]
        async with httpx.AsyncClient() as direct:
            assert jobs.json() == (await direct.get(f"{daemon.url}/v1/jobs?state=done")).json()
        assert (await http.get("/d/nobody/status")).status_code == 404
        metrics = await http.get("/fleet/metrics")
        assert 'prooflane_fleet_daemon_up{daemon="hung"} 0.0' in metrics.text
        assert 'prooflane_memory_budget_bytes{daemon="a"}' in metrics.text
        assert (await http.get("/")).status_code == 200
        rows = (await http.get("/fleet/status", params={"snapshots": "false"})).json()
        assert [("snapshot" in e, e["summary"] is not None) for e in rows["daemons"]] == [
            (False, True),
            (False, False),
        ]


class _Hostile:
    """What answers at a followed daemon's address: a /status far larger than the fleet reads, and an event
    stream that never sends a newline. Counts what it managed to send on the stream before it was cut."""

    def __init__(self) -> None:
        self.streamed = 0
        self.stream_cut = asyncio.Event()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        try:
            if head.startswith("GET /v1/events"):
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n")
                while True:
                    writer.write(b"x" * 65536)
                    await writer.drain()
                    self.streamed += 65536
            else:
                body = b'{"seq": 1, "pad": "' + b"y" * (8 << 20) + b'"}'
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
                await writer.drain()
        except (ConnectionError, OSError):
            if head.startswith("GET /v1/events"):
                self.stream_cut.set()
        finally:
            writer.close()


async def test_a_daemon_cannot_make_the_fleet_hold_more_than_it_reads(
    running: Callable[[FleetConfig], Fleet],
) -> None:
    hostile = _Hostile()
    server = await asyncio.start_server(hostile.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    config = dataclasses.replace(_config(DaemonSpec(name="h", url=f"http://127.0.0.1:{port}")),
                                 max_answer_bytes=1 << 20, timeout_secs=5.0)  # fmt: skip
    fleet = running(config)
    await fleet.start()
    try:
        await _until(
            "the oversized /status refused", lambda: "more than" in (_entry(fleet, "h")["last_error"] or "")
        )
        async with asyncio.timeout(WAIT_SECS):
            await hostile.stream_cut.wait()  # the fleet hung up on the endless line
        assert hostile.streamed < 8 << 20  # it read at most about a megabyte of it, not everything sent
        assert _entry(fleet, "h")["health"] == "unreachable"
    finally:
        server.close()


async def test_a_daemons_log_lines_through_the_fleet_with_its_token(
    engine_config: Callable[..., Config], sector: Path, running: Callable[[FleetConfig], Fleet]
) -> None:
    config = engine_config()
    assert config.log_file is not None
    config.log_file.parent.mkdir(parents=True, exist_ok=True)
    config.log_file.write_text("first\nsecond\nthird\n")
    with served(config, token="daemon-token", sector=sector) as live:
        fleet = running(_config(DaemonSpec(name="a", url=live.url, token="daemon-token"),
                                DaemonSpec(name="no-token", url=live.url)))  # fmt: skip
        await fleet.start()
        async with await _http(fleet) as client:
            one = await client.get("/fleet/daemons/a/logs", params={"lines": "2"})
            assert one.status_code == 200, one.text
            assert one.json() == {"name": "a", "file": str(config.log_file), "lines": ["second", "third"],
                                  "source": "daemon", "read_secs_ago": 0.0}  # fmt: skip
            every = (await client.get("/fleet/logs", params={"lines": "5"})).json()["daemons"]
            assert every["a"] == {"file": str(config.log_file), "lines": ["first", "second", "third"],
                                  "error": None, "source": "daemon", "read_secs_ago": 0.0}  # fmt: skip
            # The daemon's log needs its token: a daemon followed without it says why, and has no lines.
            assert every["no-token"]["lines"] == []
            assert "/v1/logs answered 401" in every["no-token"]["error"]
            refused = await client.get("/fleet/daemons/no-token/logs")
            assert refused.status_code == 502 and "401" in refused.json()["detail"]
            assert (await client.get("/fleet/daemons/nobody/logs")).status_code == 404


async def test_a_stopped_daemons_log_is_the_last_lines_the_fleet_read_with_their_age(
    engine_config: Callable[..., Config], sector: Path, running: Callable[[FleetConfig], Fleet]
) -> None:
    config = engine_config()
    assert config.log_file is not None
    config.log_file.parent.mkdir(parents=True, exist_ok=True)
    config.log_file.write_text("".join(f"line {n}\n" for n in range(30)))
    with served(config, sector=sector) as live:
        fleet = running(_config(DaemonSpec(name="a", url=live.url)))
        await fleet.start()
        async with await _http(fleet) as client:
            assert (await client.get("/fleet/daemons/a/logs", params={"lines": "20"})).status_code == 200
            assert (await client.get("/fleet/logs", params={"lines": "5"})).status_code == 200  # a short read
    await _until("a unreachable", lambda: _entry(fleet, "a")["health"] == "unreachable")
    async with await _http(fleet) as client:
        answer = await client.get("/fleet/daemons/a/logs", params={"lines": "15"})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["source"] == "fleet" and body["lines"] == [f"line {n}" for n in range(15, 30)]
        assert body["read_secs_ago"] >= 0.0 and "unreachable" in body["error"]
        every = (await client.get("/fleet/logs", params={"lines": "3"})).json()["daemons"]["a"]
        assert every["source"] == "fleet" and every["lines"] == ["line 27", "line 28", "line 29"]
        assert "unreachable" in every["error"]


async def test_a_daemon_never_read_answers_502_once_down(
    engine_config: Callable[..., Config], running: Callable[[FleetConfig], Fleet]
) -> None:
    with served(engine_config()) as live:
        fleet = running(_config(DaemonSpec(name="a", url=live.url)))
        await fleet.start()
        await _until("a up", lambda: _entry(fleet, "a")["health"] == "up")
    await _until("a unreachable", lambda: _entry(fleet, "a")["health"] == "unreachable")
    async with await _http(fleet) as client:
        answer = await client.get("/fleet/daemons/a/logs")
        assert answer.status_code == 502 and "unreachable" in answer.json()["detail"]


async def test_managing_needs_the_fleet_token_and_a_daemon_the_fleet_deployed(
    daemon: Served, running: Callable[[FleetConfig], Fleet]
) -> None:
    fleet = running(_config(DaemonSpec(name="a", url=daemon.url)))
    await fleet.start()
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with await _http(fleet) as client:
        for route in ("/fleet/daemons/a/stop", "/fleet/daemons/a/restart", "/fleet/daemons/a/deploy"):
            assert (await client.post(route)).status_code == 401
        stop = await client.post("/fleet/daemons/a/stop", headers=auth)
        assert stop.status_code == 409 and "not deployed by the fleet" in stop.json()["detail"]
        assert (await client.post("/fleet/daemons/zz/restart", headers=auth)).status_code == 404
        taken = await client.post("/fleet/daemons/a/deploy", headers=auth, json={"ssh": "h"})
        assert taken.status_code == 409 and "was not deployed by it" in taken.json()["detail"]
        for body, says in (([], "expected a JSON object"), ({"colour": 1}, "unknown key 'colour'"),
                           ({}, "key 'ssh'"), ({"ssh": "-oProxyCommand=x"}, "[user@]host"),
                           ({"ssh": "h", "config": {"port": 1}}, "'port' is set by the deploy"),
                           ({"ssh": "h", "config": {"devices": ["tpu"]}}, "unknown device 'tpu'"),
                           ({"ssh": "h", "ssh_options": ["-F", "x"]}, "'-F' is not allowed")):  # fmt: skip
            answer = await client.post("/fleet/daemons/b/deploy", headers=auth, json=body)
            assert answer.status_code == 422, answer.text
            assert says in answer.json()["detail"]
    closed = running(_config(token=""))
    async with await _http(closed) as client:
        assert (await client.post("/fleet/daemons/a/deploy", json={"ssh": "h"})).status_code == 403


async def test_a_manage_token_cannot_name_a_folder_or_an_ssh_option_that_writes_here(
    tmp_path: Path, running: Callable[[FleetConfig], Fleet]
) -> None:
    """`POST /fleet/daemons` took any `deploy_dir` (stop and restart then ran `DIR/venv/bin/prooflane` there
    over SSH) and `UserKnownHostsFile` with `StrictHostKeyChecking` (the fleet's ssh appended a line to a file
    of the caller's choosing)."""
    path = tmp_path / "fleet.toml"
    path.write_text('manage_tokens = ["manage-token"]\npoll_secs = 0.1\n')
    fleet = running(FleetConfig.load(path, port=0))
    await fleet.start()
    auth = {"Authorization": "Bearer manage-token"}
    added = {"name": "planted", "ssh": "prover@127.0.0.1", "ssh_options": ["-p", "1"]}  # a closed port
    async with await _http(fleet) as http:
        for extra, says in (
            ({"deploy_dir": "/tmp/planted"}, "key 'deploy_dir' is set by `prooflane fleet deploy` alone"),
            ({"deploy_dir": "/tmp/p", "deploy_claim": "a" * 32}, "key 'deploy_dir' is set by"),
            ({"ssh_options": ["-o", "UserKnownHostsFile=/root/.bashrc", "-o", "StrictHostKeyChecking=no"]},
             "option 'UserKnownHostsFile' is not allowed: the fleet pins it"),
            ({"ssh_options": ["-oStrictHostKeyChecking=accept-new"]},
             "option 'StrictHostKeyChecking' is not allowed: the fleet pins it"),
        ):  # fmt: skip
            answer = await http.post("/fleet/daemons", json={**added, **extra}, headers=auth)
            assert answer.status_code == 422, answer.text
            assert says in answer.json()["detail"]
        assert "daemons" not in tomllib.loads(path.read_text()) and fleet.followers == {}
        answer = await http.post("/fleet/daemons", json=added, headers=auth)
        assert answer.status_code == 201, answer.text
        refused = await http.post("/fleet/daemons/planted/restart", headers=auth)
        assert refused.status_code == 409 and "not deployed by the fleet" in refused.json()["detail"]


async def test_a_daemon_the_file_says_was_deployed_without_a_claim_is_not_managed(
    tmp_path: Path, running: Callable[[FleetConfig], Fleet]
) -> None:
    """A fleet config from before claims (or one that a token holder once wrote `deploy_dir` into) keeps
    its daemons followed; stop and restart say what to do and run nothing."""
    path = tmp_path / "fleet.toml"
    path.write_text(f'token = "{TOKEN}"\n\n[[daemons]]\nname = "old"\nssh = "prover@127.0.0.1"\n'
                    'ssh_options = ["-p", "1"]\ndeploy_dir = "/home/prover/.prooflane/old"\n')  # fmt: skip
    fleet = running(FleetConfig.load(path, port=0))
    await fleet.start()
    async with await _http(fleet) as http:
        for verb in ("stop", "restart"):
            answer = await http.post(
                f"/fleet/daemons/old/{verb}", headers={"Authorization": f"Bearer {TOKEN}"}
            )
            assert answer.status_code == 409, answer.text
            assert answer.json()["detail"] == (
                "old: the fleet holds no claim on its folder /home/prover/.prooflane/old on prover@127.0.0.1 "
                "(no deploy_claim: deployed before the fleet kept claims): nothing was run there; deploy "
                "'old' again to claim it"
            )
