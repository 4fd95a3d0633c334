"""Shutdown of real processes: `prooflane demo` stopped by SIGTERM, or killed, leaves no prooflane process
behind and frees its port."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil

HANG = 60.0  # far past the 10 s guarantee: only a hang fails here, never a slow machine


def _start_demo(data: Path, out: Path) -> tuple[subprocess.Popen[bytes], psutil.Process]:
    with out.open("wb") as log:
        demo = subprocess.Popen(
            [sys.executable, "-c", "from prooflane.cli import main; main()", "demo", "--data", str(data)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 300
    while b"dashboard:" not in out.read_bytes():
        assert demo.poll() is None, out.read_text()
        assert time.monotonic() < deadline, "the demo did not start"
        time.sleep(0.2)
    (daemon,) = psutil.Process(demo.pid).children()
    return demo, daemon


def _session(daemon: psutil.Process) -> list[psutil.Process]:
    sid = os.getsid(daemon.pid)
    found = []
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) == sid:
                found.append(proc)
        except (ProcessLookupError, PermissionError):
            continue
    return found


def _wait_all_gone(procs: list[psutil.Process]) -> list[psutil.Process]:
    _, alive = psutil.wait_procs(procs, timeout=HANG)
    return list(alive)


def test_sigterm_to_demo_ends_the_daemon_and_all_its_workers(tmp_path: Path) -> None:
    demo, daemon = _start_demo(tmp_path / "data", tmp_path / "demo.out")
    tree = _session(daemon)
    assert len(tree) > 1  # the daemon and its worker processes
    demo.send_signal(signal.SIGTERM)
    assert demo.wait(HANG) == 0
    assert _wait_all_gone(tree) == []


def test_a_daemon_whose_parent_is_killed_shuts_down_by_itself(tmp_path: Path) -> None:
    demo, daemon = _start_demo(tmp_path / "data", tmp_path / "demo.out")
    tree = _session(daemon)
    demo.kill()  # no chance to stop its daemon
    demo.wait()
    assert _wait_all_gone(tree) == []
    assert "parent process" in (tmp_path / "data" / "daemon.log").read_text()


def test_a_stop_of_the_whole_process_group_logs_no_death_and_no_alarm(tmp_path: Path) -> None:
    """systemd, `prooflane service stop` and the fleet signal the daemon's process group at once: workers that
    died of it first logged deaths, retries and "health not ok" in a stop that went as planned. Workers leave
    the signal to the daemon, which ends them in order: the log says the stop and nothing alarming."""
    from prooflane.cli.daemon_process import DaemonProcess

    daemon = DaemonProcess(tmp_path / "data", profile="tiny", log_path=tmp_path / "stderr.log")
    daemon.start(timeout=300)
    for n in range(3):  # work in flight as the signal arrives
        body = {"kind": "porep-c2", "sector": {"size": 256, "seed": "07"}, "job_id": f"j{n}"}
        assert httpx.post(f"{daemon.url}/v1/jobs", json=body, timeout=30).status_code == 202
    deadline = time.monotonic() + HANG
    while '"proving"' not in httpx.get(f"{daemon.url}/status", timeout=30).text:
        assert time.monotonic() < deadline, "no worker started proving"
        time.sleep(0.05)
    os.killpg(daemon.pid, signal.SIGTERM)
    deadline = time.monotonic() + HANG
    while daemon.running:
        assert time.monotonic() < deadline, "the daemon did not stop"
        time.sleep(0.1)
    assert daemon.stop() == 0  # already ended by the signal: its exit status, and its pipe closed
    lines = (tmp_path / "stderr.log").read_text().splitlines()
    alarming = [line for line in lines if " WARNING " in line or " ERROR " in line or " CRITICAL " in line]
    assert [line for line in alarming if "UNSAFE development keys" not in line] == [], lines
    assert any("SIGTERM received: shutting down" in line for line in lines), lines
