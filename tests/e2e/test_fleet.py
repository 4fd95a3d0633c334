"""`prooflane fleet` end to end: three real tiny daemons on loopback ports, a socket that never answers, the
fleet page in a real browser (Debian's chromium), and the SSH path through a real local sshd.

The fleet runs as its own process (`prooflane fleet --config ... --port 0`), like an operator runs it.
"""

from __future__ import annotations

import getpass
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import httpx
import psutil
import pytest
from playwright.sync_api import Browser, Page
from prometheus_client.parser import text_string_to_metric_families

from prooflane.circuits.profiles import profile_by_name
from prooflane.cli.daemon_process import DaemonProcess
from prooflane.client import circuit_digest
from tests.support.daemons import TIMEOUT, circom_files, free_port, start_daemon, wait_until
from tests.support.fleet import FleetProcess, Sshd, sshd_on_loopback

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "fleet-e2e-token"
MANAGE = "fleet-e2e-manage-token"  # a token of scope manage: submit and register, not deploy
CLI = [sys.executable, "-c", "from prooflane.cli import main; main()"]
SECTOR_BYTES = profile_by_name("tiny").sector_bytes
LEAN = 'devices = ["cpu:0"]\nworkers_per_device = 1\nsynthesis_workers = 1\n'  # three daemons on two cores
NAMES = ("alpha", "beta", "gamma")
UNREACHABLE_WITHIN_SECS = 5.0  # the fleet's promise for a killed daemon (the kernel refuses at once)
# Fields of /status that are a function of the moment it is read, not of the daemon's state.
MOMENT = {
    "taken_at",
    "uptime_secs",
    "process_rss_bytes",
    "available_bytes",
    "busy_secs",
    "busy_fraction_1m",
    "elapsed_secs",
    "history",
    "busy_seconds_total",
    "checks",
}  # fmt: skip  (checks: the journal checks run, every 5 s, between events too)


class Daemons:
    """The three daemons, each on a fixed port so that one can be killed and started again there."""

    def __init__(self, factory: pytest.TempPathFactory) -> None:
        self.factory = factory
        self.ports = {name: free_port() for name in NAMES}
        self.data: dict[str, Path] = {}
        self.live: dict[str, DaemonProcess] = {}

    def start(self, name: str) -> DaemonProcess:
        daemon = start_daemon(self.factory, name, data_dir=self.data.get(name), port=self.ports[name],
                              extra_config=LEAN)  # fmt: skip
        self.data[name] = daemon.data_dir
        self.live[name] = daemon
        return daemon

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.ports[name]}"

    def status(self, name: str) -> dict[str, Any]:
        snapshot: dict[str, Any] = httpx.get(f"{self.url(name)}/status", timeout=10).json()
        return snapshot

    def submit(self, name: str, kind: str, seed: int) -> str:
        body = {"kind": kind, "sector": {"size": SECTOR_BYTES, "seed": f"{seed:064x}"}}
        answer = httpx.post(f"{self.url(name)}/v1/jobs", json=body, timeout=30)
        assert answer.status_code == 202, answer.text
        job_id: str = answer.json()["job_id"]
        return job_id

    def stop_all(self) -> None:
        for daemon in self.live.values():
            code = daemon.stop()
            if code not in (0, None):
                print(daemon.log())


@pytest.fixture(scope="module")
def daemons(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemons]:
    group = Daemons(tmp_path_factory)
    try:
        for name in NAMES:
            group.start(name)
        yield group
    finally:
        group.stop_all()


@pytest.fixture(scope="module")
def silent() -> Iterator[str]:
    """A listening socket that accepts connections (the kernel does) and never reads or answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture(scope="module")
def fleet(daemons: Daemons, silent: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetProcess]:
    home = tmp_path_factory.mktemp("fleet")
    config = home / "fleet.toml"
    tables = [f'[[daemons]]\nname = "{n}"\nurl = "{daemons.url(n)}"\ncost_per_hour = {1.5 + i}\n'
              for i, n in enumerate(NAMES)]  # fmt: skip
    tables.append(f'[[daemons]]\nname = "silent"\nurl = "{silent}"\n')
    config.write_text(
        f'token = "{TOKEN}"\nmanage_tokens = ["{MANAGE}"]\nprice_per_proof = 0.01\ntimeout_secs = 1.0\n'
        f'backoff_max_secs = 2.0\nssh_known_hosts_file = "{home / "known_hosts"}"\n\n' + "\n".join(tables)
    )
    process = FleetProcess(config, home / "fleet.log")
    try:
        yield process
    finally:
        process.stop()


def _timeless(value: Any) -> Any:
    """The snapshot without the fields that depend on when it was read."""
    if isinstance(value, dict):
        return {k: _timeless(v) for k, v in value.items() if k not in MOMENT and not k.endswith("_secs_ago")}
    if isinstance(value, list):
        return [_timeless(v) for v in value]
    return value


def _same_as_own(fleet: FleetProcess, daemons: Daemons, name: str) -> bool:
    """Whether the fleet holds the snapshot the daemon serves now (same boot, same seq, same state)."""
    own = daemons.status(name)
    held = fleet.entry(name)["snapshot"]
    if held is None or (held["boot_id"], held["seq"]) != (own["boot_id"], own["seq"]):
        return False
    assert _timeless(held) == _timeless(own)
    return True


# --- status --------------------------------------------------------------------------------------


def test_fleet_status_matches_each_daemons_own_status(fleet: FleetProcess, daemons: Daemons) -> None:
    job = daemons.submit("alpha", "winning-post", seed=1)
    wait_until("alpha's job to finish", lambda: daemons.status("alpha")["counters"]["total_completed"] == 1)
    for name in NAMES:
        wait_until(
            f"the fleet to hold {name}'s current snapshot", partial(_same_as_own, fleet, daemons, name)
        )
        entry = fleet.entry(name)
        assert entry["health"] == "up" and entry["fresh"] and entry["where"] == daemons.url(name)
        own = daemons.status(name)
        summary = entry["summary"]
        assert summary["workers"] == len(own["workers"]) == 1
        assert summary["devices"] == len(own["devices"]) == 1
        assert summary["total_completed"] == own["counters"]["total_completed"]
        assert summary["memory_total_bytes"] == own["memory"]["total_bytes"]
    alpha = fleet.entry("alpha")
    assert any(p["job_id"] == job for p in alpha["snapshot"]["pipelines"] + alpha["snapshot"]["recent_jobs"])
    assert alpha["summary"]["proofs_per_hour"] > 0
    assert alpha["summary"]["cost_per_proof"] == pytest.approx(1.5 / alpha["summary"]["proofs_per_hour"])
    totals = fleet.status()["totals"]
    assert totals["counted"] == list(NAMES) and totals["not_counted"] == ["silent"]
    assert totals["workers"] == 3 and totals["devices"] == 3
    health = httpx.get(f"{fleet.url}/healthz", timeout=10).json()
    assert health["daemons"] == 4 and health["reachable"] == 3 and health["unreachable"] == ["silent"]


def test_fleet_metrics_label_every_daemon(fleet: FleetProcess, daemons: Daemons) -> None:
    wait_until("all three up", lambda: fleet.status()["totals"]["counted"] == list(NAMES))
    answer = httpx.get(f"{fleet.url}/fleet/metrics", timeout=10)
    assert answer.status_code == 200
    seen: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(answer.text):
        for sample in family.samples:
            assert "daemon" in sample.labels, sample
            seen[(sample.name, sample.labels["daemon"])] = sample.value
    for name in NAMES:
        budget = daemons.status(name)["memory"]["total_bytes"]
        assert seen[("prooflane_memory_budget_bytes", name)] == budget
        assert seen[("prooflane_fleet_daemon_up", name)] == 1
    assert seen[("prooflane_fleet_daemon_up", "silent")] == 0
    assert ("prooflane_memory_budget_bytes", "silent") not in seen


# --- failure -------------------------------------------------------------------------------------


def test_silent_daemon_does_not_delay_the_others(fleet: FleetProcess, daemons: Daemons) -> None:
    wait_until("silent to be unreachable", lambda: fleet.entry("silent")["health"] == "unreachable")
    silent = fleet.entry("silent")
    assert silent["last_error"] == "no answer in time" and silent["snapshot"] is None
    # While it still hangs every attempt, a change on beta reaches the fleet like any other.
    before = daemons.status("beta")["counters"]["total_completed"]
    daemons.submit("beta", "winning-post", seed=2)
    wait_until("beta's job in the fleet", lambda: _completed(fleet, "beta") == before + 1)
    assert fleet.entry("silent")["health"] == "unreachable"
    assert all(fleet.entry(name)["health"] == "up" for name in NAMES)


def _completed(fleet: FleetProcess, name: str) -> int:
    completed: int = fleet.entry(name)["summary"]["total_completed"]
    return completed


def _is_up(fleet: FleetProcess, name: str) -> bool:
    return bool(fleet.entry(name)["health"] == "up")


def test_killed_daemon_is_unreachable_within_5s_and_recovers(fleet: FleetProcess, daemons: Daemons) -> None:
    wait_until("gamma up", lambda: fleet.entry("gamma")["health"] == "up")
    first_boot = fleet.entry("gamma")["snapshot"]["boot_id"]
    daemons.live["gamma"].kill()
    killed_at = time.monotonic()
    wait_until("gamma unreachable", lambda: fleet.entry("gamma")["health"] == "unreachable",
               timeout=UNREACHABLE_WITHIN_SECS)  # fmt: skip
    gone = fleet.entry("gamma")
    assert gone["snapshot"]["boot_id"] == first_boot  # its last good snapshot, kept with its age
    assert gone["snapshot_age_secs"] is not None and gone["snapshot_age_secs"] >= 0
    assert gone["last_error"] and not gone["fresh"]
    assert "gamma" in fleet.status()["totals"]["not_counted"]
    assert time.monotonic() - killed_at < UNREACHABLE_WITHIN_SECS + 1  # wait_until's own bound, restated

    daemons.start("gamma")
    wait_until("gamma back with a new boot", lambda: fleet.entry("gamma")["health"] == "up"
               and fleet.entry("gamma")["snapshot"]["boot_id"] != first_boot)  # fmt: skip
    wait_until("gamma's current snapshot", lambda: _same_as_own(fleet, daemons, "gamma"))


# --- the page ------------------------------------------------------------------------------------


class _RayStatus(http.server.BaseHTTPRequestHandler):
    """A daemon API that answers /status with a real daemon's snapshot plus the `ray` and `nodes` fields a
    Ray-backed daemon reports (prooflane's own /status does not carry them yet)."""

    snapshot: ClassVar[dict[str, Any]] = {}

    def do_GET(self) -> None:
        if self.path != "/status":
            self.send_error(404)
            return
        body = json.dumps(self.snapshot).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def ray_daemon(daemons: Daemons) -> Iterator[str]:
    nodes = [{"node_id": "head-10.0.0.1", "alive": True}, {"node_id": "gpu-10.0.0.2", "alive": True},
             {"node_id": "gpu-10.0.0.3", "alive": False}]  # fmt: skip
    handler = type("Handler", (_RayStatus,), {
        "snapshot": {**daemons.status("alpha"), "ray": {"address": "10.0.0.1:6379"}, "nodes": nodes}
    })  # fmt: skip
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _record(errors: list[str], exc: object) -> None:
    errors.append(str(exc))


def _rows(page: Page) -> dict[str, dict[str, str]]:
    return dict(
        page.evaluate("""() => Object.fromEntries(
      Array.from(document.querySelectorAll('tr.daemon')).map((tr) => [tr.dataset.name, {
        health: tr.dataset.health,
        healthText: tr.querySelector('[data-testid="d-health"]').innerText,
        workers: tr.querySelector('[data-testid="d-workers"]').innerText,
        pph: tr.querySelector('[data-testid="d-pph"]').innerText,
        memory: tr.querySelector('[data-testid="d-memory"]').innerText,
      }]))""")
    )


def test_fleet_page_at_1280_and_1920(
    fleet: FleetProcess, daemons: Daemons, ray_daemon: str, browser: Browser, output_dir: Path
) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    added = httpx.post(f"{fleet.url}/fleet/daemons", headers=auth, timeout=10,
                       json={"name": "ray-head", "url": ray_daemon, "cost_per_hour": 12.0})  # fmt: skip
    assert added.status_code == 201, added.text
    far = {"name": "far", "ssh": "prooflane-operator@gpu-node-0017.invalid", "remote_port": 19821,
           "ssh_options": ["-o", "ConnectTimeout=1"]}  # fmt: skip
    assert httpx.post(f"{fleet.url}/fleet/daemons", headers=auth, timeout=10, json=far).status_code == 201
    try:
        wait_until("all up but silent", lambda: fleet.status()["totals"]["not_counted"] == ["silent", "far"])
        daemons.submit("beta", "porep-c2", seed=3)  # something to see on the page
        for width in (1280, 1920):
            page = browser.new_page(viewport={"width": width, "height": 1000})
            errors: list[str] = []
            page.on("pageerror", partial(_record, errors))
            page.goto(f"{fleet.url}/")
            page.wait_for_function("document.body.dataset.stale === 'false' && "
                                   "document.querySelectorAll('tr.daemon').length === 6")  # fmt: skip
            page.wait_for_function("document.querySelector('tr.daemon[data-name=\"silent\"]')"
                                   ".dataset.health === 'unreachable'")  # fmt: skip
            rows = _rows(page)
            assert list(rows) == [*NAMES, "silent", "ray-head", "far"]
            # Nothing runs into the next cell, and an address breaks only before its host:port.
            assert (
                page.evaluate("""() => [...document.querySelectorAll('tr.daemon td')]
                .filter((td) => td.scrollWidth > td.clientWidth + 1).map((td) => td.dataset.testid)""")
                == []
            )
            one_line = """() => [...document.querySelectorAll('.d-where .nowrap')]
                .filter((s) => new Set([...s.getClientRects()].map((r) => Math.round(r.top))).size !== 1)
                .map((s) => s.textContent)"""  # a line may hold several boxes of one span
            assert page.evaluate(one_line) == []
            need = page.locator('tr.daemon[data-name="ray-head"] [data-testid="d-need"]').inner_text()
            assert need.startswith("1200")  # 12 an hour at 0.01 a proof
            for name in NAMES:
                assert rows[name]["health"] == "up" and rows[name]["workers"].endswith("/ 1")
            silent = rows["silent"]
            assert "unreachable" in silent["healthText"] and "no snapshot yet" in silent["healthText"]
            assert silent["workers"] == silent["pph"] == silent["memory"] == "—"  # never idle, never zero
            ray = page.locator('tr.ray[data-key="r:ray-head"]')
            assert "Ray cluster at 10.0.0.1:6379: 3 nodes" in ray.inner_text()
            assert "gpu-10.0.0.3 (dead)" in ray.inner_text()
            assert page.locator('tr.daemon[data-name="ray-head"] [data-testid="ray-badge"]').is_visible()

            page.click('tr.daemon[data-name="beta"]')
            frame = page.frame_locator('[data-testid="detail-frame"]')
            frame.locator('body[data-stale="false"]').wait_for()
            frame.locator('body[data-connection="live"]').wait_for()  # the fleet's event stream for it
            beta_boot = daemons.status("beta")["boot_id"]
            assert frame.locator('[data-testid="boot-id"]').inner_text() == beta_boot
            assert frame.locator('[data-testid="worker-card"]').count() == 1
            page.screenshot(path=str(output_dir / f"fleet-{width}.png"), full_page=True)
            page.close()
            assert errors == [], errors
    finally:
        for name in ("ray-head", "far"):
            httpx.delete(f"{fleet.url}/fleet/daemons/{name}", headers=auth, timeout=10)


# --- SSH -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    with sshd_on_loopback(tmp_path_factory) as server:
        yield server


def test_daemons_reached_through_ssh_share_one_connection(
    fleet: FleetProcess, daemons: Daemons, sshd: Sshd
) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    target = f"{getpass.getuser()}@127.0.0.1"
    names = {"ssh-alpha": "alpha", "ssh-beta": "beta"}
    sshd.trust(fleet.config_path.parent / "known_hosts")  # the fleet's own file: no daemon may name one
    try:
        for name, daemon in names.items():
            body = {
                "name": name,
                "ssh": target,
                "remote_port": daemons.ports[daemon],
                "ssh_options": sshd.options(),
            }
            answer = httpx.post(f"{fleet.url}/fleet/daemons", headers=auth, json=body, timeout=10)
            assert answer.status_code == 201, answer.text
        for name, daemon in names.items():
            wait_until(f"{name} up through ssh", partial(_is_up, fleet, name), timeout=60)
            entry = fleet.entry(name)
            assert entry["where"] == f"ssh://{target}:{daemons.ports[daemon]}"
            own = daemons.status(daemon)
            assert entry["snapshot"]["boot_id"] == own["boot_id"]
            wait_until(f"{name} current", partial(_same_through, fleet, daemons, name, daemon))
        health = httpx.get(f"{fleet.url}/healthz", timeout=10).json()
        assert health["ssh_masters"] == 1  # one connection for the host, two forwards over it

        # The connection drops (its ssh process dies): the fleet starts a new one and both daemons answer
        # through it again (it may be quick enough that no poll ever fails in between).
        (master,) = _ssh_masters(fleet)
        master.kill()
        killed_at = time.time()
        wait_until("a new master connection", partial(_new_master, fleet, master.pid), timeout=60)
        for name in names:
            wait_until(
                f"{name} answering after the drop", partial(_fresh_since, fleet, name, killed_at), timeout=60
            )
    finally:
        for name in names:
            httpx.delete(f"{fleet.url}/fleet/daemons/{name}", headers=auth, timeout=10)
    wait_until("the master to end with its last forward",
               lambda: httpx.get(f"{fleet.url}/healthz", timeout=10).json()["ssh_masters"] == 0)  # fmt: skip


def _ssh_masters(fleet: FleetProcess) -> list[psutil.Process]:
    """The fleet's master ssh connections: its child processes started with ControlMaster=yes."""
    masters = []
    for child in psutil.Process(fleet.process.pid).children():
        try:  # a killed master is a zombie until the fleet reaps it, and then gone
            if child.status() != psutil.STATUS_ZOMBIE and "ControlMaster=yes" in child.cmdline():
                masters.append(child)
        except psutil.Error:
            continue
    return masters


def _new_master(fleet: FleetProcess, old: int) -> bool:
    return [m.pid for m in _ssh_masters(fleet)] not in ([], [old])


def _fresh_since(fleet: FleetProcess, name: str, moment: float) -> bool:
    entry = fleet.entry(name)
    return bool(entry["health"] == "up" and entry["snapshot_received_at"] > moment)


def _same_through(fleet: FleetProcess, daemons: Daemons, name: str, daemon: str) -> bool:
    own = daemons.status(daemon)
    held = fleet.entry(name)["snapshot"]
    if (held["boot_id"], held["seq"]) != (own["boot_id"], own["seq"]):
        return False
    assert _timeless(held) == _timeless(own)
    return True


def _fleet_cli(fleet: FleetProcess, *args: str, token: str = MANAGE) -> subprocess.CompletedProcess[str]:
    env = {"PROOFLANE_FLEET_URL": fleet.url, "PROOFLANE_FLEET_TOKEN": token}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=TIMEOUT * 2, check=False,
                          env={**os.environ, **env})  # fmt: skip


def test_jobs_and_circuits_go_to_the_daemons_through_the_fleet(
    fleet: FleetProcess, daemons: Daemons, tmp_path: Path
) -> None:
    wait_until("alpha and beta up", lambda: _is_up(fleet, "alpha") and _is_up(fleet, "beta"))
    sector = daemons.data["alpha"] / "sectors" / "s1"
    made = subprocess.run([*CLI, "sector", "new", "--size", str(SECTOR_BYTES), "--out", str(sector)],
                          capture_output=True, text=True, check=False, timeout=TIMEOUT)  # fmt: skip
    assert made.returncode == 0, made.stderr
    done = _fleet_cli(fleet, "fleet", "submit", "alpha", "--kind", "winning-post", "--sector", "s1", "--wait")
    assert done.returncode == 0, done.stderr
    job_id, *rest = done.stdout.splitlines()
    proof = json.loads("\n".join(rest))
    assert proof["job_id"] == job_id and proof["kind"] == "winning-post"
    own = httpx.get(f"{daemons.url('alpha')}/v1/jobs/{job_id}/proof", timeout=30).json()
    assert own == proof  # the daemon's own proof, read through the fleet

    files = circom_files(tmp_path)
    args = ("fleet", "circuits", "register", "c", "--zkey", str(files["zkey"]), "--daemons", "alpha,beta")
    registered = _fleet_cli(fleet, *args)
    assert registered.returncode == 0, registered.stdout + registered.stderr
    assert sorted(registered.stdout.splitlines()) == [
        f"{n}: registered (sha256 {circuit_digest(files['zkey'])})" for n in ("alpha", "beta")
    ]
    assert [c["name"] for c in httpx.get(f"{daemons.url('beta')}/v1/circuits", timeout=30).json()] == ["c"]

    refused = _fleet_cli(fleet, "fleet", "submit", "alpha", "--kind", "winning-post", "--sector", "s1",
                         token="not-a-token")  # fmt: skip
    assert refused.returncode == 1 and "the fleet answered 401: wrong bearer token" in refused.stderr
    deploy = _fleet_cli(fleet, "fleet", "deploy", "alpha", "--ssh", "nobody@127.0.0.1")
    assert deploy.returncode == 1  # a manage token may not deploy
    assert "the fleet answered 403: this token's scope is manage: this route needs deploy" in deploy.stderr
    missing = _fleet_cli(fleet, "fleet", "submit", "nobody", "--kind", "winning-post", "--sector", "s1")
    assert missing.returncode == 1 and "404: no daemon named 'nobody' in the fleet" in missing.stderr
