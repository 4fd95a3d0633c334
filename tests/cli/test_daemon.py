"""The daemon commands of the CLI (serve, submit, status, circuits) and the workload helpers.

The commands talk over real HTTP to the real engine (the in-process backend, real proofs at ``tiny``) behind
the daemon's app and a uvicorn server on a free port."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from prooflane.circuits import Sector
from prooflane.cli.entry import app
from prooflane.cli.workload import MixError, parse_mix, plan
from prooflane.client import Client
from prooflane.config import Config
from prooflane.devices import Step
from prooflane.errors import DaemonError
from prooflane.models import InlineSector
from prooflane.server import bind
from prooflane.states import JobState
from tests.support.clock import ManualClock
from tests.support.daemons import free_port
from tests.support.engine import Served, served

pytestmark = pytest.mark.timeout(120)
runner = CliRunner()
CLI = [sys.executable, "-c", "from prooflane.cli import main; main()"]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def daemon(engine_config: Callable[..., Config], sector: Path, clock: ManualClock) -> Iterator[Served]:
    with served(engine_config(), clock=clock, sector=sector) as running:
        yield running


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


def test_status_check_exits_0_when_up_and_1_when_down(daemon: Served) -> None:
    up = runner.invoke(app, ["status", "--check", "--url", daemon.url])
    assert up.exit_code == 0, up.output
    assert up.stdout.startswith("ok:")
    down = runner.invoke(app, ["status", "--check", "--url", f"http://127.0.0.1:{free_port()}"])
    assert down.exit_code == 1
    assert down.stdout.startswith("down:")


def test_status_prints_a_readable_summary(daemon: Served, clock: ManualClock) -> None:
    # The device section of one job lasts 30 s of the engine's clock, then the device idles 30 s.
    daemon.call(lambda: daemon.h.gate.act(lambda s: s.name == "prove_start", lambda _: clock.advance(30)))
    assert daemon.done(daemon.submit("winning-post", job_id="w-1")) is JobState.DONE
    daemon.call(lambda: clock.advance(30))
    result = runner.invoke(app, ["status", "--url", daemon.url])
    assert result.exit_code == 0, result.output
    assert "invariants ok" in result.stdout
    assert "completed 1  failed 0  cancelled 0" in result.stdout
    assert "device busy (last minute): cpu:0 50%" in result.stdout
    assert "cpu:0/w0" in result.stdout
    assert "w-1" in result.stdout and "winning-post" in result.stdout
    raw = runner.invoke(app, ["status", "--json", "--url", daemon.url])
    assert json.loads(raw.stdout)["boot_id"] == daemon.call(lambda: daemon.engine.snapshot().boot_id)


LONG_ID = "ps-snap-update-3644168-33825-" + "x" * 35  # 64 characters, the longest id: wider than rich gives


def test_status_piped_into_a_file_prints_whole_job_ids(daemon: Served, tmp_path: Path) -> None:
    assert daemon.done(daemon.submit("winning-post", job_id=LONG_ID)) is JobState.DONE
    out = tmp_path / "status.txt"
    with out.open("w") as file:  # a real file, as `prooflane status > file` gives it
        done = subprocess.run([*CLI, "status", "--url", daemon.url], stdout=file, stderr=subprocess.PIPE,
                              text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert LONG_ID in text and "winning-post" in text
    assert "…" not in text  # nothing shortened


def test_status_on_a_narrow_terminal_keeps_ids_whole(daemon: Served) -> None:
    assert daemon.done(daemon.submit("winning-post", job_id=LONG_ID)) is JobState.DONE
    result = runner.invoke(app, ["status", "--url", daemon.url], env={"COLUMNS": "40"}, color=True)
    assert result.exit_code == 0, result.output
    assert LONG_ID in result.stdout and "…" not in result.stdout


def test_an_error_is_one_line_when_stderr_is_a_pipe() -> None:
    url = f"http://127.0.0.1:{free_port()}/" + "long/" * 20  # an error text well over 80 columns
    done = subprocess.run(
        [*CLI, "status", "--url", url], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and len(lines[0]) > 100, done.stderr
    assert "Traceback" not in done.stderr


def test_status_of_a_daemon_that_is_down_is_one_error_line() -> None:
    result = runner.invoke(app, ["status", "--url", f"http://127.0.0.1:{free_port()}"])
    assert result.exit_code == 1
    assert "cannot reach the prooflane daemon" in result.stderr
    assert "Traceback" not in result.output


def test_submit_prints_the_job_id_alone_on_the_first_line(daemon: Served, sector: Path) -> None:
    daemon.hold()
    result = runner.invoke(
        app, ["submit", "--kind", "porep-c2", "--sector", str(sector), "--url", daemon.url]
    )
    assert result.exit_code == 0, result.output
    job_id = result.stdout.splitlines()[0]
    assert daemon.call(lambda: daemon.engine.job(job_id)) is not None
    assert daemon.journalled_request(job_id)["sector"] == str(sector.resolve())


def test_submit_wait_shows_progress_then_prints_the_proof(daemon: Served, sector: Path) -> None:
    args = ["submit", "--kind", "winning-post", "--sector", str(sector), "--wait", "--url", daemon.url]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    proof = json.loads("\n".join(lines[1:]))
    assert proof["job_id"] == lines[0] and proof["kind"] == "winning-post"
    assert [p["index"] for p in proof["partitions"]] == [0]
    assert daemon.call(lambda: daemon.h.state(lines[0])) is JobState.DONE
    assert f"{lines[0]} done" in result.stderr  # the progress bar names the job and its state


def test_submit_wait_of_a_failing_job_exits_1_with_the_reason(daemon: Served, sector: Path) -> None:
    def broken(step: Step) -> None:
        raise ValueError("point at infinity in the MSM input")

    daemon.call(lambda: daemon.h.gate.act(lambda s: s.name == "prove_start", broken))
    args = ["submit", "--kind", "winning-post", "--sector", str(sector), "--wait", "--url", daemon.url]
    result = runner.invoke(app, args)
    assert result.exit_code == 1
    job_id = result.stdout.splitlines()[0]
    assert f"job {job_id} failed: partition 0 failed" in result.stderr
    assert "point at infinity in the MSM input" in result.stderr
    assert "Traceback" not in result.output


def test_job_proof_and_cancel_follow_a_job_by_its_id(daemon: Served, sector: Path, tmp_path: Path) -> None:
    held = daemon.hold()
    job_id = daemon.submit("porep-c2", sector=str(sector))
    daemon.reached(held)
    shown = runner.invoke(app, ["job", job_id, "--url", daemon.url])
    assert shown.exit_code == 0, shown.output
    first, *rows = shown.stdout.splitlines()
    assert first.startswith(f"{job_id}  porep-c2  running, 0/") and "priority" in first
    assert any("synthesizing" in row for row in rows)  # the partition table says what each partition does
    as_json = json.loads(runner.invoke(app, ["job", job_id, "--json", "--url", daemon.url]).stdout)
    assert as_json["job_id"] == job_id and len(as_json["partitions"]) == as_json["total_partitions"]

    early = runner.invoke(app, ["proof", job_id, "--url", daemon.url])
    assert early.exit_code == 1
    assert f"error: job {job_id} is running (0/" in early.stderr and "--wait SECS" in early.stderr

    daemon.release(held)
    out = tmp_path / "proof.json"
    got = runner.invoke(app, ["proof", job_id, "--wait", "60", "--out", str(out), "--url", daemon.url])
    assert got.exit_code == 0, got.output
    proof = json.loads(out.read_text())
    assert proof["job_id"] == job_id and len(proof["partitions"]) == as_json["total_partitions"]

    again = runner.invoke(app, ["cancel", job_id, "--url", daemon.url])
    assert again.exit_code == 1 and "already finished (done); nothing to cancel" in again.stderr

    held = daemon.hold()
    other = daemon.submit("winning-post", sector=str(sector))
    daemon.reached(held)
    cancelled = runner.invoke(app, ["cancel", other, "--url", daemon.url])
    assert cancelled.exit_code == 0, cancelled.output
    assert cancelled.stdout.startswith(f"{other}  winning-post  cancelled")
    refused = runner.invoke(app, ["proof", other, "--url", daemon.url])
    assert refused.exit_code == 1 and f"409: job {other} cancelled: cancelled by request" in refused.stderr
    daemon.release(held)

    missing = runner.invoke(app, ["job", "no-such-job", "--url", daemon.url])
    assert missing.exit_code == 1 and "404: no job with id 'no-such-job'" in missing.stderr
    assert "Traceback" not in shown.output + early.output + missing.output + refused.output


def test_submit_of_an_unknown_kind_says_why_without_a_traceback(daemon: Served, sector: Path) -> None:
    result = runner.invoke(app, ["submit", "--kind", "nope", "--sector", str(sector), "--url", daemon.url])
    assert result.exit_code == 1
    assert "error: the daemon answered 404: unknown kind 'nope': expected one of" in result.stderr
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


def test_serve_on_a_data_folder_it_cannot_write_is_one_line_and_makes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only file system (as the kernel says it: access(2) answers EROFS), and a file in the way."""
    read_only = tmp_path / "mounted"
    read_only.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if Path(p) == read_only else real_access(p, mode))
    result = runner.invoke(app, ["serve", "--data", str(read_only / "data")])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.stderr.strip() == (
        f"error: data_dir {read_only / 'data'} cannot be made: {read_only} cannot be written "
        "(read-only, or not yours)"
    )
    assert list(read_only.iterdir()) == []
    (tmp_path / "file").write_text("")
    result = runner.invoke(app, ["serve", "--data", str(tmp_path / "file")])
    assert result.exit_code == 1
    assert (
        result.stderr.strip()
        == f"error: data_dir {tmp_path / 'file'} is not a folder: the daemon keeps its "
        + ("journal, keys and log there")
    )


def test_circuits_register_and_list(daemon: Served, circuit_files: tuple[Path, Path]) -> None:
    zkey, _ = circuit_files
    result = runner.invoke(app, ["circuits", "register", "chain", "--zkey", str(zkey), "--url", daemon.url])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["name"] == "chain"
    listed = runner.invoke(app, ["circuits", "list", "--url", daemon.url])
    assert listed.stdout.startswith("chain  bn128")


def journalled_sector(daemon: Served, job_id: str) -> str:
    """The sector folder the engine resolved the job's request to (what it proves)."""
    path = daemon.engine.config.data_dir / "journal.sqlite3"
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        (row,) = db.execute("SELECT request FROM jobs WHERE job_id = ?", (job_id,)).fetchall()
    sector: str = json.loads(row[0])["sector"]
    return sector


def test_submit_names_a_sector_of_the_daemons_sector_folder(daemon: Served, tmp_path: Path) -> None:
    daemon.hold()
    folder = daemon.engine.config.data_dir / "sectors" / "s1"
    made = runner.invoke(app, ["sector", "new", "--size", "256", "--out", str(folder)])
    assert made.exit_code == 0, made.output
    result = runner.invoke(app, ["submit", "--kind", "porep-c2", "--sector", "s1", "--url", daemon.url])
    assert result.exit_code == 0, result.output
    job_id = result.stdout.splitlines()[0]
    assert daemon.journalled_request(job_id)["sector"] == "s1"  # sent as written
    assert journalled_sector(daemon, job_id) == str(folder.resolve())


def test_a_sector_name_the_daemon_does_not_hold_says_where_it_looked(daemon: Served) -> None:
    result = runner.invoke(app, ["submit", "--kind", "porep-c2", "--sector", "s9", "--url", daemon.url])
    assert result.exit_code == 1
    (line,) = result.stderr.splitlines()
    sectors = daemon.engine.config.data_dir.absolute() / "sectors"
    assert f"sector '{sectors / 's9'}': no such file or folder on the daemon's machine" in line
    assert f"looked up in the daemon's sector folder ({sectors}" in line
    assert f"prooflane sector new --out {sectors}/NAME" in line


def test_a_sector_outside_the_allowed_folders_is_still_refused(daemon: Served, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    Sector.create(outside, 256, seed=3)
    for given in (str(outside), "../../elsewhere"):  # by its path, or climbing out of the sector folder
        result = runner.invoke(app, ["submit", "--kind", "porep-c2", "--sector", given, "--url", daemon.url])
        assert result.exit_code == 1, result.output
        (line,) = result.stderr.splitlines()
        assert "the daemon answered 403" in line and "outside the folders this daemon may read" in line


def test_an_inline_sector_never_replaces_a_sector_of_the_same_name(daemon: Served) -> None:
    folder = daemon.engine.config.data_dir / "sectors" / "s1"
    Sector.create(folder, 256, seed=4)
    before = sorted(p.name for p in folder.iterdir())
    with Client(daemon.url) as client, pytest.raises(DaemonError) as refused:
        client.submit("winning-post", sector=InlineSector(size=256, seed="05"), job_id="s1")
    assert refused.value.status == 409
    assert "pick another job_id" in refused.value.detail
    assert sorted(p.name for p in folder.iterdir()) == before


def test_submit_sends_json_inputs_one_partition_per_object(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[dict[str, Any]] = []

    def submit(client: Client, kind: str, **fields: Any) -> str:  # the request, as the daemon would get it
        sent.append({"kind": kind, **fields})
        return "job-1"

    monkeypatch.setattr(Client, "submit", submit)
    (tmp_path / "one.json").write_text('{"a": 3, "b": [1, 2]}')
    (tmp_path / "two.json").write_text('[{"a": 4}, {"a": 5}]')
    args = ["submit", "--kind", "circom", "--circuit", "mul", "--input", str(tmp_path / "one.json")]
    result = runner.invoke(app, [*args, "--input", str(tmp_path / "two.json")])
    assert result.exit_code == 0, result.output
    assert result.stdout == "job-1\n"
    (request,) = sent
    assert request["circuit"] == "mul"
    assert request["witnesses"] == [{"a": 3, "b": [1, 2]}, {"a": 4}, {"a": 5}]


def test_status_says_what_the_memory_and_rss_figures_hold(daemon: Served) -> None:
    result = runner.invoke(app, ["status", "--url", daemon.url])
    assert result.exit_code == 0, result.output
    s = daemon.call(lambda: daemon.engine.snapshot()).memory

    def mib(n: int) -> str:
        return f"{n / (1 << 20):.1f} MiB"

    held = f"memory held {mib(s.used_bytes)} of {mib(s.total_bytes)} (reserved {mib(s.reserved_bytes)}, "
    assert held + f"cached keys {mib(s.cached_bytes)})" in result.stdout
    assert "(daemon and workers)" in result.stdout
    assert "rss" not in result.stdout


def test_bench_measures_the_daemon_prooflane_url_names(daemon: Served, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    args = ["bench", "--jobs", "2", "--mix", "winning-post=1", "--out", str(out)]
    result = runner.invoke(app, args, env={"PROOFLANE_URL": daemon.url.removeprefix("http://")})
    assert result.exit_code == 0, result.output
    assert "started a daemon" not in result.stderr
    report = json.loads(out.read_text())
    assert report["url"] == daemon.url
    assert (report["completed"], report["partitions"], report["partitions_proven"]) == (2, 2, 2)
    assert report["partitions_per_hour"] == pytest.approx(report["jobs_per_hour"])
    assert "partition proofs" in result.stdout and "partitions/hour" in result.stdout


def test_demo_on_a_port_that_is_taken_says_so_and_starts_nothing(tmp_path: Path) -> None:
    taken = bind("127.0.0.1", 0)
    port = taken.getsockname()[1]
    try:
        result = runner.invoke(app, ["demo", "--port", str(port), "--data", str(tmp_path / "data")])
    finally:
        taken.close()
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        f"error: port {port} is taken: give another --port, or --port 0 for any free one"
    ]
    assert not (tmp_path / "data").exists()


def test_status_names_the_arithmetic_and_warns_of_the_libraries(
    engine_config: Callable[..., Config], sector: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow = {"bn128": "c-extension", "bls12381": "libraries: PROOFLANE_NATIVE=0"}
    monkeypatch.setattr("prooflane.engine.engine.arithmetics", lambda: slow)  # what that process would find
    runs = {"bn128": "avx512-ifma", "bls12381": "libraries"}
    monkeypatch.setattr("prooflane.engine.engine.products", lambda: runs)
    with served(engine_config(), sector=sector) as daemon:
        result = runner.invoke(app, ["status", "--url", daemon.url], env={"COLUMNS": "60"})
        check = runner.invoke(app, ["status", "--check", "--url", daemon.url])
        assert httpx.get(f"{daemon.url}/status").json()["products"] == runs
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())  # folded lines joined: every word is there
    assert "arithmetic: bn128 c-extension (avx512-ifma), bls12381 libraries: PROOFLANE_NATIVE=0" in text
    assert "warning: bls12381 proves on the libraries, the slower arithmetic (PROOFLANE_NATIVE=0)" in text
    assert check.exit_code == 0 and check.stdout.startswith("ok:")  # slower, but it can do its work


def test_status_says_what_became_of_each_key_s_tables_whole(
    engine_config: Callable[..., Config], sector: Path, keys_dir: Path
) -> None:
    """A budget with room for a partition and the key, not for the key's tables: the summary says they are
    not used for the key proven, with the whole reason ``/status`` gives."""
    from prooflane.kinds import prepare_builtin

    post = prepare_builtin("winning-post", "tiny", "bn128", str(keys_dir))
    budget = post.partition_bytes + post.key_alloc_bytes + post.table_alloc_bytes
    with served(engine_config(memory_budget_bytes=budget), sector=sector) as daemon:
        assert daemon.done(daemon.submit("winning-post", job_id="t-1")) is JobState.DONE
        result = runner.invoke(app, ["status", "--url", daemon.url], env={"COLUMNS": "60"})
        tables = runner.invoke(app, ["status", "--json", "--url", daemon.url])
    assert result.exit_code == 0, result.output
    [told] = json.loads(tables.stdout)["tables"]
    assert told["state"] == "unused" and "quarter of the memory budget" in told["reason"]
    text = " ".join(result.stdout.split())  # folded lines joined: every word is there
    assert f"msm tables of {told['key']}: not used ({told['reason']})" in text
