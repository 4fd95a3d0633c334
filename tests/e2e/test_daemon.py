"""End to end against a real `prooflane serve` (tiny profile): every kind, snarkjs, auth, 4xx, CLI, SSE."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from prooflane.cli.daemon_process import DaemonProcess
from prooflane.client import Client, ServerEvent
from prooflane.config import DEFAULT_PORT
from prooflane.errors import DaemonError
from prooflane.groth16 import read_r1cs, setup, write_zkey
from prooflane.server import bind
from tests.support.daemons import TIMEOUT, running, seed_keys, snarkjs_verify, start_daemon, wait_done
from tests.support.groth16_samples import MUL_CIRCOM

TOKEN = "e2e-token"
KINDS = ("porep-c2", "snap-update", "window-post", "winning-post")
CLI = [sys.executable, "-c", "from prooflane.cli import main; main()"]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    yield from running(start_daemon(tmp_path_factory, "daemon", token=TOKEN))


@pytest.fixture
def client(daemon: DaemonProcess) -> Iterator[Client]:
    with Client(daemon.url, TOKEN) as c:
        yield c


@pytest.fixture(scope="module")
def sector(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny-profile sector folder made by `prooflane sector new`."""
    folder = tmp_path_factory.mktemp("sector") / "s1"
    cli("sector", "new", "--size", "256", "--out", str(folder))
    return folder


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=TIMEOUT, env=env, check=False
    )


def test_every_kind_proves_and_verifies_with_snarkjs(
    client: Client, sector: Path, snarkjs: Path, tmp_path: Path
) -> None:
    ids = {kind: client.submit(kind, sector=sector, randomness="ab" * 32) for kind in KINDS}
    views = wait_done(client, list(ids.values()))
    assert [v.state for v in views] == ["done"] * len(KINDS), [v.error for v in views]
    kinds = {k.name: k for k in client.kinds()}
    for kind, job_id in ids.items():
        found = client.proof(job_id)
        assert found is not None
        assert found.kind == kind
        assert [p.index for p in found.partitions] == list(range(kinds[kind].partitions))
        key = httpx.get(f"{client.url}/v1/kinds/{kind}/verification_key").json()
        # snarkjs checks the first and the last partition of each kind (each takes a node start-up).
        for part in {p.index: p for p in (found.partitions[0], found.partitions[-1])}.values():
            said = snarkjs_verify(snarkjs, tmp_path / f"{kind}-{part.index}", key, part.proof, part.public)
            assert "OK!" in said, (kind, part.index, said)


def test_a_tampered_proof_fails_snarkjs(client: Client, sector: Path, snarkjs: Path, tmp_path: Path) -> None:
    job_id = client.submit("winning-post", sector=sector)
    found = client.proof(job_id, wait=TIMEOUT)
    assert found is not None
    key = client.verification_key("winning-post")
    public = [str(int(found.partitions[0].public[0]) + 1), *found.partitions[0].public[1:]]
    said = snarkjs_verify(snarkjs, tmp_path, key, found.partitions[0].proof, public)
    assert "OK!" not in said


def test_a_repeated_job_id_is_the_same_job(client: Client, sector: Path) -> None:
    first = client.submit("winning-post", sector=sector, job_id="same-job-1")
    again = client.submit("winning-post", sector=sector, job_id="same-job-1")
    assert first == again == "same-job-1"
    assert sum(v.job_id == "same-job-1" for v in client.jobs(limit=1000)) == 1
    with pytest.raises(DaemonError) as taken:
        client.submit("window-post", sector=sector, job_id="same-job-1")
    assert taken.value.status == 409
    assert "same-job-1" in taken.value.detail
    wait_done(client, [first])


def test_bad_requests_get_4xx_that_say_what_is_wrong(
    client: Client, daemon: DaemonProcess, tmp_path: Path
) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    cases = [
        ({"kind": "no-such-kind", "sector": str(tmp_path)}, 404, "no-such-kind"),
        ({"kind": "porep-c2", "sector": str(tmp_path / "missing")}, 422, "sector"),
        ({"kind": "porep-c2", "sector": {"size": 1024}}, 422, "256"),
        ({"kind": "porep-c2"}, 422, "needs 'sector'"),
        ({"kind": "porep-c2", "sector": "/x", "randomness": "xyz"}, 422, "randomness"),
    ]
    for body, status, says in cases:
        answer = httpx.post(f"{daemon.url}/v1/jobs", json=body, headers=auth)
        assert answer.status_code == status, (body, answer.text)
        assert says in answer.json()["detail"], (body, answer.text)
    assert httpx.get(f"{daemon.url}/v1/jobs/ghost").status_code == 404
    huge = httpx.post(f"{daemon.url}/v1/jobs", content=b"x" * (2 << 20), headers=auth)
    assert huge.status_code == 413
    assert "too large" in huge.json()["detail"]


def test_mutating_routes_need_the_bearer_token(daemon: DaemonProcess, sector: Path) -> None:
    body = {"kind": "winning-post", "sector": str(sector)}
    refused = httpx.post(f"{daemon.url}/v1/jobs", json=body)
    assert refused.status_code == 401
    assert "bearer token" in refused.json()["detail"]
    wrong = httpx.post(f"{daemon.url}/v1/jobs", json=body, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    assert httpx.delete(f"{daemon.url}/v1/jobs/anything").status_code == 401
    assert httpx.get(f"{daemon.url}/status").status_code == 200


def test_cli_submit_wait_prints_the_id_first_then_the_proof(daemon: DaemonProcess, sector: Path) -> None:
    env = dict(os.environ, PROOFLANE_URL=daemon.url, PROOFLANE_TOKEN=TOKEN)
    done = cli("submit", "--kind", "winning-post", "--sector", str(sector), "--wait", env=env)
    assert done.returncode == 0, done.stderr
    job_id, *rest = done.stdout.splitlines()
    assert len(job_id) >= 8
    assert " " not in job_id
    assert f'"job_id": "{job_id}"' in "\n".join(rest)
    assert "1/1" in done.stderr  # the progress bar reached the end


def test_cli_status_check_is_0_when_up(daemon: DaemonProcess) -> None:
    up = cli("status", "--check", "--url", daemon.url)
    assert up.returncode == 0, up.stdout + up.stderr
    summary = cli("status", "--url", daemon.url)
    assert summary.returncode == 0
    assert "invariants ok" in summary.stdout


def test_events_resume_from_last_event_id_without_a_gap(client: Client, sector: Path) -> None:
    before = client.status()["seq"]
    job_id = client.submit("porep-c2", sector=sector)
    first = take(client, before, 25)
    assert [e.id for e in first] == list(range(before + 1, before + 26))
    rest = take(client, before + 25, 25)
    assert [e.id for e in rest] == list(range(before + 26, before + 51))
    assert all(e.name != "resync" for e in first + rest)
    assert any(e.data.get("job_id") == job_id for e in rest if isinstance(e.data, dict))
    wait_done(client, [job_id])
    # An id the daemon cannot resume from (here: from the future) gets a resync first.
    (resync,) = take(client, 10**9, 1)
    assert resync.name == "resync"
    assert isinstance(resync.data, dict)
    assert resync.data["seq"] >= before + 50


def take(client: Client, after: int, count: int) -> list[ServerEvent]:
    """The first ``count`` events after event ``after`` (then the stream is closed)."""
    with contextlib.closing(client.events(last_event_id=after)) as stream:
        return list(itertools.islice(stream, count))


def test_the_dashboard_metrics_and_openapi_are_served(daemon: DaemonProcess) -> None:
    page = httpx.get(f"{daemon.url}/")
    assert page.status_code == 200
    assert "prooflane" in page.text
    spec = httpx.get(f"{daemon.url}/openapi.json").json()
    assert "/v1/jobs" in spec["paths"]
    assert httpx.get(f"{daemon.url}/healthz").json()["ok"] is True
    metrics = httpx.get(f"{daemon.url}/metrics").text
    assert 'prooflane_partitions_total{kind="winning-post",outcome="done"}' in metrics


def test_a_circom_circuit_registered_by_the_cli_proves_over_http(
    daemon: DaemonProcess, client: Client, snarkjs: Path, tmp_path: Path
) -> None:
    circom2 = snarkjs.parent / "circom2"
    (tmp_path / "mul.circom").write_text(MUL_CIRCOM)
    argv = [str(circom2), str(tmp_path / "mul.circom"), "--r1cs", "--wasm", "-o", str(tmp_path)]
    subprocess.run(argv, check=True, capture_output=True, timeout=TIMEOUT)
    write_zkey(tmp_path / "mul.zkey", setup(read_r1cs(tmp_path / "mul.r1cs"), seed=b"e2e-mul"))
    wasm = tmp_path / "mul_js" / "mul.wasm"
    args = ["circuits", "register", "mul", "--zkey", str(tmp_path / "mul.zkey"), "--wasm", str(wasm)]
    registered = cli(*args, "--url", daemon.url, "--token", TOKEN)
    assert registered.returncode == 0, registered.stderr
    assert '"has_witness_generator": true' in registered.stdout
    job_id = client.submit("circom", circuit="mul", witnesses=[{"a": 3, "b": 11}, {"a": 5, "b": 7}])
    found = client.proof(job_id, wait=TIMEOUT)
    assert found is not None
    assert [p.public for p in found.partitions] == [["33"], ["35"]]
    key = httpx.get(f"{daemon.url}/v1/kinds/circom/verification_key", params={"circuit": "mul"}).json()
    for part in found.partitions:
        said = snarkjs_verify(snarkjs, tmp_path / f"p{part.index}", key, part.proof, part.public)
        assert "OK!" in said, said


def test_cli_bench_reports_throughput_and_writes_json(daemon: DaemonProcess, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    args = ["--jobs", "3", "--mix", "winning-post=2,window-post=1", "--out", str(out)]
    env = dict(os.environ, PROOFLANE_URL=daemon.url, PROOFLANE_TOKEN=TOKEN)  # as every other command takes
    done = cli("bench", *args, env=env)
    assert done.returncode == 0, done.stderr
    assert "started a daemon" not in done.stderr
    assert "jobs/hour" in done.stdout and "partitions/hour" in done.stdout
    result = json.loads(out.read_text())
    assert result["url"] == daemon.url
    assert (result["jobs"], result["completed"], result["failed"]) == (3, 3, 0)
    assert result["completed_by_kind"] == {"winning-post": 2, "window-post": 1}
    assert result["jobs_per_hour"] > 0 and result["partitions_per_hour"] >= result["jobs_per_hour"]
    assert set(result["phase_ms"]) == {"synth", "prove", "finalize"}
    assert 0 <= result["device_busy_fraction"] <= 1


def test_demo_feeds_a_daemon_until_ctrl_c_then_stops_it(tmp_path_factory: pytest.TempPathFactory) -> None:
    data = tmp_path_factory.mktemp("demo") / "data"
    seed_keys(tmp_path_factory, data)
    argv = [*CLI, "demo", "--data", str(data), "--in-flight", "2", "--mix", "winning-post=1"]
    with contextlib.ExitStack() as held:
        with contextlib.suppress(OSError):  # the default port taken (by this test, or already): it moves
            held.enter_context(bind("127.0.0.1", DEFAULT_PORT))
        lines, rest, demo = run_demo(argv)
    moved = next(line for line in lines if line.startswith(f"port {DEFAULT_PORT} is taken"))
    url = next(line.split()[1] for line in lines if line.startswith("dashboard:")).rstrip("/")
    assert moved.strip() == f"port {DEFAULT_PORT} is taken: the dashboard is on {url}/"
    assert demo.returncode == 0, "".join(lines) + rest
    assert "stopping the daemon" in rest
    assert cli("status", "--check", "--url", url).returncode == 1  # the daemon is gone too


def run_demo(argv: list[str]) -> tuple[list[str], str, subprocess.Popen[str]]:
    """Run `prooflane demo` until it reports a job done, then Ctrl-C it: its lines until then, the rest."""
    demo = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert demo.stdout is not None
    lines = []
    for line in demo.stdout:
        lines.append(line)
        if line.startswith("submitted") and " done " in line:  # progress, with a job done
            break
    demo.send_signal(signal.SIGINT)
    progress = lines[-1]  # "submitted N  done M ... J jobs/hour (P partition proofs/hour)"
    assert "jobs/hour" in progress and "partition proofs/hour" in progress, progress
    rest, _ = demo.communicate(timeout=TIMEOUT)
    return lines, rest, demo


def test_cli_status_check_is_1_when_down(tmp_path_factory: pytest.TempPathFactory) -> None:
    daemon = start_daemon(tmp_path_factory, "short-lived")
    url = daemon.url
    assert cli("status", "--check", "--url", url).returncode == 0
    assert daemon.stop(sig=signal.SIGINT) == 0  # Ctrl-C: a clean exit
    down = cli("status", "--check", "--url", url)
    assert down.returncode == 1
    assert down.stdout.startswith("down:")
