"""`prooflane fleet deploy`, `restart`, `stop` and `logs` against a real sshd on loopback: a second "machine"
is a folder reached over SSH with nothing of prooflane in it.

The install is real (the fleet's wheel, copied over SSH, pip-installed into a venv on the host, the daemon
started by `prooflane service` under its supervisor), with one shortcut so that the test downloads
nothing: the host's venv is made by the test beforehand, seeing this project's venv's site-packages through
a .pth file (the dependencies; not prooflane itself, whose editable-install hook is not read from there),
and pip is told `--no-deps --no-index`. A deploy finds that venv as it finds its own on an upgrade; every
other step is the path users take. A host where the install fails (no venv, no index) shows pip's reason.
"""

from __future__ import annotations

import getpass
import os
import subprocess
import sys
import sysconfig
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from prooflane.client import Client
from prooflane.fleet.wheel import PURE_TAG, wheel_tag
from prooflane.models import InlineSector
from tests.support.browser import chromium
from tests.support.daemons import TIMEOUT, free_port, snarkjs_verify, wait_done, wait_until
from tests.support.fleet import FleetProcess, Sshd, sshd_on_loopback

pytestmark = [pytest.mark.timeout(1200)]

TOKEN = "deploy-e2e-fleet-token"
DAEMON_TOKEN = "deploy-e2e-daemon-token"
CLI = [sys.executable, "-c", "from prooflane.cli import main; main()"]
LEAN = 'devices = ["cpu:0"]\nworkers_per_device = 1\nsynthesis_workers = 1\nprofile = "tiny"\n'
BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    with sshd_on_loopback(tmp_path_factory) as server:
        yield server


@pytest.fixture(scope="module")
def fleet(sshd: Sshd, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetProcess]:
    home = tmp_path_factory.mktemp("deploy-fleet")
    config = home / "fleet.toml"
    sshd.trust(home / "known_hosts")
    config.write_text(f'token = "{TOKEN}"\nprice_per_proof = 0.01\ndeploy_healthy_secs = 240\n'
                      f'ssh_known_hosts_file = "{home / "known_hosts"}"\n')  # fmt: skip
    process = FleetProcess(config, home / "fleet.log")
    try:
        yield process
    finally:
        process.stop()


def _cli(fleet: FleetProcess, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PROOFLANE_FLEET_URL=fleet.url, PROOFLANE_FLEET_TOKEN=TOKEN)
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=env, timeout=TIMEOUT * 3,
                          check=False)  # fmt: skip


def _host_venv(folder: Path) -> None:
    """The host's venv, made beforehand: this interpreter's base, seeing this project's site-packages."""
    subprocess.run([BASE_PYTHON, "-m", "venv", str(folder / "venv")], check=True, capture_output=True)
    site = Path(sysconfig.get_paths()["purelib"])  # this project's venv (the tests run in it)
    relative = site.relative_to(Path(sys.prefix))
    (folder / "venv" / relative / "project-deps.pth").write_text(f"{site}\n")


def _processes_in(folder: Path) -> list[psutil.Process]:
    """Live processes whose working folder is ``folder`` (the supervisor, the daemon, its workers)."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.status() != psutil.STATUS_ZOMBIE and Path(process.cwd()).is_relative_to(folder):
                found.append(process)
        except (psutil.Error, OSError):
            continue
    return found


def _entry(fleet: FleetProcess, name: str) -> dict[str, Any]:
    return fleet.entry(name)


def test_deploy_prove_restart_logs_stop(
    fleet: FleetProcess, sshd: Sshd, tmp_path: Path, snarkjs: Path
) -> None:
    host = tmp_path / "host" / "gpu-1"  # the second machine's folder for the daemon: empty but its venv
    host.mkdir(parents=True)
    _host_venv(host)
    port = free_port()
    (tmp_path / "lean.toml").write_text(LEAN)
    target = f"{getpass.getuser()}@127.0.0.1"
    options = " ".join(sshd.options())
    done = _cli(fleet, "fleet", "deploy", "gpu-1", "--ssh", target, "--ssh-options", options,
                "--port", str(port), "--dir", str(host), "--pip-args", "--no-deps --no-index",
                "--daemon-config", str(tmp_path / "lean.toml"), "--daemon-token", DAEMON_TOKEN,
                "--cost-per-hour", "0.5")  # fmt: skip
    assert done.returncode == 0, done.stderr + (fleet.log_path.read_text())
    assert done.stdout.startswith("deployed gpu-1 ("), done.stdout
    assert "says it can work" in done.stdout
    # Installed from the fleet's wheel into the host's venv, and the daemon runs from there.
    installed = list((host / "venv").glob("lib/python*/site-packages/prooflane/__init__.py"))
    assert installed, "prooflane was not installed into the host's venv"
    # The wheel is tagged for the C extension it carries; this host (the same Python) installs and loads it,
    # so nothing is said of the libraries.
    tag = wheel_tag()
    assert [w.name.endswith(f"-{tag}.whl") for w in (host / "wheels").glob("*.whl")] == [True]
    if tag != PURE_TAG:
        assert list(installed[0].parent.glob(f"groth16/_curvemath*{sysconfig.get_config_var('EXT_SUFFIX')}"))
    assert "libraries" not in done.stdout, done.stdout
    daemon_pid = int((host / "daemon.pid").read_text())
    assert psutil.Process(daemon_pid).cmdline()[0].startswith(str(host / "venv"))
    # Claimed: the id the fleet keeps for it is in the folder, readable by the SSH user alone; stop and
    # restart below run there only because it is.
    (saved,) = [d for d in tomllib.loads(fleet.config_path.read_text())["daemons"] if d["name"] == "gpu-1"]
    assert saved["deploy_dir"] == str(host) and len(saved["deploy_claim"]) == 32
    assert (host / ".prooflane-claim").read_text() == saved["deploy_claim"]
    assert (host / ".prooflane-claim").stat().st_mode & 0o777 == 0o600

    # Followed by the fleet through its SSH tunnel, with its break-even: 0.5 an hour at 0.01 a proof.
    wait_until("gpu-1 up in the fleet", lambda: _entry(fleet, "gpu-1")["health"] == "up", timeout=60)
    entry = _entry(fleet, "gpu-1")
    assert entry["where"] == f"ssh://{target}:{port}"
    assert entry["break_even"]["proofs_per_hour_needed"] == pytest.approx(50.0)

    # A job proved by the deployed daemon verifies with snarkjs.
    with Client(f"http://127.0.0.1:{port}", token=DAEMON_TOKEN) as client:
        first = client.submit("winning-post", sector=InlineSector(size=256, seed=f"{1:064x}"))
        (view,) = wait_done(client, [first])
        assert view.state == "done", view
        proof = client.proof(first)
        assert proof is not None
        part = proof.partitions[0]
        key = client.verification_key("winning-post")
        said = snarkjs_verify(snarkjs, tmp_path / "verify", key, part.proof, part.public)
        assert "OK!" in said, said

        # The folder is gpu-1's: a deploy of another name into it is refused, by the fleet (the folder as
        # it follows it) or by the host (the folder spelled otherwise), and gpu-1 is left as it was.
        alias = tmp_path / "alias"  # the folder by another path: only the host can tell it is gpu-1's
        alias.symlink_to(host)
        for spelled in (host, alias):
            taken = _cli(fleet, "fleet", "deploy", "gpu-2", "--ssh", target, "--ssh-options", options,
                         "--port", str(free_port()), "--dir", str(spelled))  # fmt: skip
            assert taken.returncode == 1, taken.stdout + taken.stderr
            said = f"409: gpu-2: the folder {spelled} on {target} holds daemon 'gpu-1' (deployed there)"
            assert taken.stderr.startswith(f"error: the fleet answered {said}"), taken.stderr
        assert int((host / "daemon.pid").read_text()) == daemon_pid and psutil.pid_exists(daemon_pid)
        assert "gpu-2" not in {e["name"] for e in fleet.status()["daemons"]}
        assert tomllib.loads((host / "prooflane.toml").read_text())["port"] == port
        assert client.health()

        # Restarted while a job runs: the old process tree is gone, and the job resumes and completes.
        boot = client.status()["boot_id"]
        running = client.submit("porep-c2", sector=InlineSector(size=256, seed=f"{2:064x}"))
        wait_until("the porep job to start", lambda: any(
            p.state == "done" for p in client.job(running).partitions))  # fmt: skip
        old_session = daemon_pid
        done = _cli(fleet, "fleet", "restart", "gpu-1")
        assert done.returncode == 0, done.stderr
        assert "stopped" not in done.stdout.splitlines()[-1]  # the last line is the start's
        assert not [p for p in psutil.process_iter() if _sid(p) == old_session]
        (view,) = wait_done(client, [running])
        assert view.state == "done", view
        assert client.status()["boot_id"] != boot

        # Its log lines, through the fleet: the command line and the page's source.
        done = _cli(fleet, "fleet", "logs", "gpu-1", "--lines", "400")
        assert done.returncode == 0, done.stderr
        assert running in done.stdout  # the job's lines, before and after the restart
        wait_until("gpu-1's lines in /fleet/logs", lambda: running in _page_log(fleet, "gpu-1"))
        _the_page_shows_its_log_and_break_even(fleet, running)

    # Stopped: no process of it is left, its port is free, and the fleet shows it stopped (on purpose).
    # From the page's Stop button (the route `fleet stop` takes too: once stopped, it finds nothing left).
    new_session = int((host / "daemon.pid").read_text())
    said = _stop_from_the_page(fleet, "gpu-1")
    assert said.startswith("gpu-1: stopped: supervisor pid ") and f"port {port} free" in said, said
    assert _processes_in(host) == []
    done = _cli(fleet, "fleet", "stop", "gpu-1")
    assert done.returncode == 0, done.stderr
    again = f"no supervisor was running; no process of daemon session {new_session} left; port {port} free"
    assert done.stdout.strip() == f"gpu-1: stopped: {again}"
    assert not [p for p in psutil.process_iter() if _sid(p) == new_session]
    wait_until("gpu-1 stopped", lambda: _entry(fleet, "gpu-1")["health"] == "stopped", timeout=60)
    assert _entry(fleet, "gpu-1")["stopped_secs_ago"] >= 0.0  # on purpose, not just "unreachable"
    # Down, its log is still there: read over SSH from its folder, and stderr says so.
    done = _cli(fleet, "fleet", "logs", "gpu-1", "--lines", "400")
    assert done.returncode == 0, done.stderr
    assert "read over SSH from" in done.stderr and running in done.stdout

    # Deployed again with its name alone: the upgrade, with every setting of the first deploy kept (the host,
    # port, folder and token in the fleet's config; the pip arguments and daemon config in deploy.json).
    done = _cli(fleet, "fleet", "deploy", "gpu-1")
    assert done.returncode == 0, done.stderr
    wait_until("gpu-1 up again", lambda: _entry(fleet, "gpu-1")["health"] == "up", timeout=60)
    with Client(f"http://127.0.0.1:{port}", token=DAEMON_TOKEN) as client:
        assert client.job(first).state == "done"  # the same data folder
    written = tomllib.loads((host / "prooflane.toml").read_text())
    assert {k: written[k] for k in tomllib.loads(LEAN)} == tomllib.loads(LEAN)  # the first deploy's keys
    done = _cli(fleet, "fleet", "stop", "gpu-1")
    assert done.returncode == 0, done.stderr
    assert _processes_in(host) == []
    httpx.delete(f"{fleet.url}/fleet/daemons/gpu-1", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)


def _the_page_shows_its_log_and_break_even(fleet: FleetProcess, job_id: str) -> None:
    """In chromium: gpu-1's log block holds the job's lines, and its row the proofs per hour it needs."""
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"{fleet.url}/")
        block = page.locator('[data-testid="log"][data-name="gpu-1"] [data-testid="log-lines"]')
        block.wait_for(timeout=30_000)
        page.wait_for_function(
            "(id) => document.querySelector('[data-testid=\"log\"][data-name=\"gpu-1\"] pre')"
            ".textContent.includes(id)", arg=job_id, timeout=30_000)  # fmt: skip
        need = page.locator('tr.daemon[data-name="gpu-1"] [data-testid="d-need"]')
        page.wait_for_function("() => document.querySelector("
                               "'tr.daemon[data-name=\"gpu-1\"] [data-testid=\"d-need\"]')"
                               ".dataset.reached !== ''", timeout=30_000)  # fmt: skip
        assert need.inner_text().startswith("50.0\n")  # 0.5 an hour at 0.01 a proof; then reached or short
        assert errors == []
        page.close()


def _stop_from_the_page(fleet: FleetProcess, name: str) -> str:
    """Stop ``name`` with the page's Manage form; what the page then says."""
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{fleet.url}/")
        page.get_by_test_id("m-token").fill(TOKEN)
        page.get_by_test_id("m-name").fill(name)
        page.get_by_test_id("m-stop").click()
        page.wait_for_function("() => ['done', 'failed'].includes("
                               "document.querySelector('[data-testid=m-result]').dataset.state)",
                               timeout=TIMEOUT * 1000)  # fmt: skip
        said: str = page.get_by_test_id("m-result").inner_text()
        page.close()
        return said


def _page_log(fleet: FleetProcess, name: str) -> str:
    """The lines the page shows of a daemon's log (``GET /fleet/logs``), as one text."""
    every = httpx.get(f"{fleet.url}/fleet/logs?lines=50", timeout=10).json()["daemons"]
    return "\n".join(every[name]["lines"])


def _sid(process: psutil.Process) -> int | None:
    try:
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        return os.getsid(process.pid)
    except (psutil.Error, OSError):
        return None


def test_a_failed_install_says_why_and_adds_nothing(fleet: FleetProcess, sshd: Sshd, tmp_path: Path) -> None:
    host = tmp_path / "bare"  # no venv: the deploy makes one, and pip finds no index for the dependencies
    target = f"{getpass.getuser()}@127.0.0.1"
    started = time.monotonic()
    options = " ".join(sshd.options())
    done = _cli(fleet, "fleet", "deploy", "bare-1", "--ssh", target, "--ssh-options", options,
                "--port", str(free_port()), "--dir", str(host), "--python", BASE_PYTHON,
                "--pip-args", "--no-index")  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert "bare-1: pip install on" in lines[0] and "failed" in lines[0], lines[0]
    assert "No matching distribution" in lines[0] or "Could not find a version" in lines[0], lines[0]
    assert "bare-1" not in {e["name"] for e in fleet.status()["daemons"]}
    assert _processes_in(host) == []
    assert time.monotonic() - started < TIMEOUT * 3
