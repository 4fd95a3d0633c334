"""`prooflane service` on a folder, without starting a daemon: what it says when nothing runs, and that it
will not start while the daemon's port is held, naming the holder. Starting, supervising, restarting and
stopping a real daemon: tests/e2e/test_fleet_deploy.py."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prooflane.cli.entry import app
from prooflane.cli.user_unit import unit_name, unit_text
from prooflane.server import bind

pytestmark = pytest.mark.timeout(60)
runner = CliRunner()


def _folder(tmp_path: Path, port: int) -> Path:
    (tmp_path / "prooflane.toml").write_text(f'port = {port}\ndata_dir = "{tmp_path / "data"}"\n')
    return tmp_path


def test_stop_and_status_when_nothing_runs(tmp_path: Path) -> None:
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    sock.close()
    folder = _folder(tmp_path, port)
    stopped = runner.invoke(app, ["service", "stop", "--dir", str(folder)])
    assert stopped.exit_code == 0, stopped.output
    said = f"stopped: no supervisor was running; no daemon was started here; port {port} free"
    assert stopped.stdout.strip() == said
    status = runner.invoke(app, ["service", "status", "--dir", str(folder)])
    assert status.exit_code == 1 and status.stdout.strip() == "not running"


def test_start_refuses_a_port_that_is_held_naming_the_holder(tmp_path: Path) -> None:
    sock = bind("127.0.0.1", 0)  # listening: what a daemon that would not die leaves behind
    try:
        folder = _folder(tmp_path, sock.getsockname()[1])
        started = runner.invoke(app, ["service", "start", "--dir", str(folder), "--wait", "5"])
        assert started.exit_code == 1, started.output
        [line] = started.stderr.splitlines()
        assert f"cannot start: port {sock.getsockname()[1]} is held by pid {os.getpid()}" in line
        assert not (folder / "service.pid").exists()
    finally:
        sock.close()


def test_the_user_unit_runs_the_supervisor_with_every_word_quoted(tmp_path: Path) -> None:
    folder = tmp_path / 'a folder with 100% odd "names"'
    command = ["/venv/bin/python", "-c", "from prooflane.cli import main; main()", "service", "run",
               "--dir", str(folder)]  # fmt: skip
    text = unit_text(folder, command, 30.0)
    (exec_line,) = [line for line in text.splitlines() if line.startswith("ExecStart=")]
    assert shlex.split(exec_line.removeprefix("ExecStart=").replace("%%", "%")) == command
    assert "TimeoutStopSec=45\n" in text and "Restart=on-failure\n" in text
    assert f"StandardOutput=append:{folder / 'service.log'}".replace("%", "%%") in text
    assert unit_name(folder) == unit_name(Path(str(folder)))  # one unit per folder
    assert unit_name(folder) != unit_name(tmp_path)
