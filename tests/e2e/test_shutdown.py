"""Shutdown of real processes: `prooflane demo` stopped by SIGTERM, or killed, leaves no prooflane process
behind and frees its port."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

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
