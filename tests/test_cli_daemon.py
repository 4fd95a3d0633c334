"""The daemon commands of the CLI (serve, submit, status, circuits) and the workload helpers."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fake_engine import FakeEngine, Served
from fake_engine import served as serve_app
from prooflane._workload import MixError, parse_mix, plan
from prooflane.cli import app
from prooflane.server import bind

runner = CliRunner()


@pytest.fixture
def served() -> Iterator[Served]:
    with serve_app(FakeEngine()) as running:
        yield running


def free_port() -> int:
    sock = bind("127.0.0.1", 0)
    port: int = sock.getsockname()[1]
    sock.close()
    return port


def test_parse_mix_reads_kinds_and_weights() -> None:
    assert parse_mix("porep-c2=2, snap-update=1,winning-post") == {
        "porep-c2": 2,
        "snap-update": 1,
        "winning-post": 1,
    }


@pytest.mark.parametrize(
    ("text", "says"),
    [("", "empty"), ("porep-c2=0", "whole number >= 1"), ("a=x", "whole number"), ("a=1,a=2", "twice")],
)
def test_parse_mix_names_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(MixError, match=says):
        parse_mix(text)


def test_plan_keeps_the_proportions_and_interleaves() -> None:
    order = plan(9, {"porep-c2": 2, "winning-post": 1})
    assert Counter(order) == {"porep-c2": 6, "winning-post": 3}
    assert order[:3] == ["porep-c2", "winning-post", "porep-c2"]


def test_status_check_exits_0_when_up_and_1_when_down(served: Served) -> None:
    up = runner.invoke(app, ["status", "--check", "--url", served.url])
    assert up.exit_code == 0, up.output
    assert up.stdout.startswith("ok:")
    down = runner.invoke(app, ["status", "--check", "--url", f"http://127.0.0.1:{free_port()}"])
    assert down.exit_code == 1
    assert down.stdout.startswith("down:")


def test_status_prints_a_readable_summary(served: Served) -> None:
    result = runner.invoke(app, ["status", "--url", served.url])
    assert result.exit_code == 0, result.output
    assert "invariants ok" in result.stdout
    assert "cpu:0/w0" in result.stdout
    assert "device busy (last minute): cpu:0 50%" in result.stdout
    assert "porep-c2" in result.stdout
    raw = runner.invoke(app, ["status", "--json", "--url", served.url])
    assert json.loads(raw.stdout)["boot_id"] == "boot"


def test_status_of_a_daemon_that_is_down_is_one_error_line() -> None:
    result = runner.invoke(app, ["status", "--url", f"http://127.0.0.1:{free_port()}"])
    assert result.exit_code == 1
    assert "cannot reach the prooflane daemon" in result.stderr
    assert "Traceback" not in result.output


def test_submit_prints_the_job_id_alone_on_the_first_line(served: Served, tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["submit", "--kind", "porep-c2", "--sector", str(tmp_path), "--url", served.url]
    )
    assert result.exit_code == 0, result.output
    job_id = result.stdout.splitlines()[0]
    assert job_id in served.engine.views
    assert served.engine.requests[job_id].sector == str(tmp_path)


def test_submit_wait_shows_progress_then_prints_the_proof(served: Served, tmp_path: Path) -> None:
    served.engine.finish_after = 0.3
    args = ["submit", "--kind", "winning-post", "--sector", str(tmp_path), "--wait", "--url", served.url]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] in served.engine.views
    assert json.loads("\n".join(lines[1:]))["job_id"] == lines[0]
    assert lines[0] in result.stderr  # the progress bar names the job


def test_submit_of_an_unknown_kind_says_why_without_a_traceback(served: Served, tmp_path: Path) -> None:
    result = runner.invoke(app, ["submit", "--kind", "nope", "--sector", str(tmp_path), "--url", served.url])
    assert result.exit_code == 1
    assert "error: the daemon answered 404: unknown proof kind 'nope'" in result.stderr
    assert "Traceback" not in result.output


def test_serve_reports_a_port_in_use_and_a_bad_config(tmp_path: Path) -> None:
    taken = bind("127.0.0.1", 0)
    port = taken.getsockname()[1]
    try:
        result = runner.invoke(app, ["serve", "--data", str(tmp_path), "--port", str(port)])
    finally:
        taken.close()
    assert result.exit_code == 1
    assert f"cannot listen on 127.0.0.1:{port}: the port is in use" in result.stderr
    config = tmp_path / "prooflane.toml"
    config.write_text('profile = "huge"\n')
    result = runner.invoke(app, ["serve", "--config", str(config)])
    assert result.exit_code == 1
    assert "profile" in result.stderr
    assert "Traceback" not in result.output


def test_circuits_register_and_list(served: Served, tmp_path: Path) -> None:
    zkey = tmp_path / "mul.zkey"
    result = runner.invoke(app, ["circuits", "register", "mul", "--zkey", str(zkey), "--url", served.url])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["name"] == "mul"
    listed = runner.invoke(app, ["circuits", "list", "--url", served.url])
    assert listed.stdout.startswith("mul  bn128")
