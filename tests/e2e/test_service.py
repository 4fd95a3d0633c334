"""`prooflane service` on a folder with a real daemon, its processes killed outright: the supervisor starts a
SIGKILLed daemon again, and a daemon whose supervisor was SIGKILLed is still stopped, whole, by `service stop`
(and by `restart`). Deploying over SSH, and stop/restart through the fleet: tests/e2e/test_fleet_deploy.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import pytest

from tests.support.daemons import free_port, wait_until

pytestmark = [pytest.mark.timeout(300)]

CLI = [sys.executable, "-c", "from prooflane.cli import main; main()", "service"]


def _service(verb: str, folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, verb, "--dir", str(folder), *args], capture_output=True, text=True,
                          timeout=240, check=False)  # fmt: skip


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _session(sid: int) -> list[int]:
    alive = []
    for process in psutil.process_iter(["status"]):
        try:
            if process.info["status"] != psutil.STATUS_ZOMBIE and os.getsid(process.pid) == sid:
                alive.append(process.pid)
        except (OSError, psutil.Error):
            continue
    return alive


def test_killed_processes_of_a_service_are_restarted_or_stopped_whole(tmp_path: Path) -> None:
    port = free_port()
    (tmp_path / "prooflane.toml").write_text(
        f'port = {port}\ndata_dir = "{tmp_path / "data"}"\ndevices = ["cpu:0"]\nprofile = "tiny"\n'
    )
    started = _service("start", tmp_path, "--wait", "120")
    assert started.returncode == 0, started.stderr
    try:
        # The daemon SIGKILLed: the supervisor starts it again, and /healthz comes back.
        first = int((tmp_path / "daemon.pid").read_text())
        os.kill(first, signal.SIGKILL)
        wait_until("another daemon", lambda: int((tmp_path / "daemon.pid").read_text()) != first, timeout=60)
        wait_until("it to say it can work", lambda: _healthy(port), timeout=120)
        assert _session(first) == []  # the killed daemon's workers went with it

        # The supervisor SIGKILLed: its daemon runs on alone, and `restart` then `stop` still end it whole.
        daemon = int((tmp_path / "daemon.pid").read_text())
        os.kill(int((tmp_path / "service.pid").read_text()), signal.SIGKILL)
        assert _healthy(port) and _session(daemon)
        restarted = _service("restart", tmp_path, "--wait", "120")
        assert restarted.returncode == 0, restarted.stderr
        assert _session(daemon) == [] and _healthy(port)
        daemon = int((tmp_path / "daemon.pid").read_text())
        os.kill(int((tmp_path / "service.pid").read_text()), signal.SIGKILL)
        stopped = _service("stop", tmp_path)
        assert stopped.returncode == 0, stopped.stderr
        assert stopped.stdout.strip() == (f"stopped: no supervisor was running; no process of daemon session "
                                          f"{daemon} left; port {port} free")  # fmt: skip
        assert _session(daemon) == [] and not _healthy(port)
    finally:
        _service("stop", tmp_path)
