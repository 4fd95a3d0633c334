"""A client that cannot reach the daemon's disk: circomlib's SHA-256 circuit (compiled by circom2, a dev key
from `prooflane setup`) uploaded to real daemons, proven from JSON inputs, verified by snarkjs; the same
through a real fleet process to three daemons at once. And a 100 MB upload: the daemon's RSS stays within a
few MiB of idle while `/status` keeps answering, and a refused upload leaves no file behind."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from prooflane.client import Client, circuit_digest
from prooflane.errors import DaemonError
from tests.support.daemons import TIMEOUT, snarkjs_verify, start_daemon, wait_done
from tests.support.fleet import FleetProcess

pytestmark = [pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "upload-e2e"
LEAN = 'devices = ["cpu:0"]\nworkers_per_device = 1\nsynthesis_workers = 1\n'
BITS = 64
SHA256_CIRCOM = f"""pragma circom 2.0.0;
include "circomlib/sha256/sha256.circom";
component main = Sha256({BITS});
"""
RSS_GROWTH_BOUND = 32 << 20  # what a 100 MB upload may add to the daemon's RSS
UPLOAD_BYTES = 100 * 1000 * 1000


@pytest.fixture(scope="module")
def client_side() -> Iterator[Path]:
    """A folder of the client's own, outside every daemon's allowed folders (the session's temp folder)."""
    folder = Path(tempfile.mkdtemp(prefix="prooflane-client-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def sha256(client_side: Path) -> dict[str, Path]:
    """Sha256(64) compiled by circom2 (.r1cs, .wasm) and a development key made by `prooflane setup`."""
    circom2 = ROOT / "node_modules" / ".bin" / "circom2"
    if not circom2.exists():
        pytest.fail("circom2 is not installed: run `make setup` (it runs `npm ci`)")
    # circom2 (circom as WebAssembly) sees only the folder it runs in and those above it, by relative
    # paths: circomlib's sources are copied beside the circuit (as benchmarks/bench_circom.py does).
    shutil.copytree(ROOT / "node_modules" / "circomlib" / "circuits", client_side / "circomlib")
    (client_side / "sha.circom").write_text(SHA256_CIRCOM)
    argv = [str(circom2), "sha.circom", "--r1cs", "--wasm", "-o", "."]
    subprocess.run(argv, check=True, capture_output=True, cwd=client_side, timeout=TIMEOUT)
    setup = [sys.executable, "-c", "from prooflane.cli import main; main()", "setup", "sha.r1cs"]
    subprocess.run([*setup, "--zkey", "sha.zkey", "--seed", "e2e-upload"], check=True, cwd=client_side,
                   capture_output=True, timeout=TIMEOUT)  # fmt: skip
    return {"zkey": client_side / "sha.zkey", "wasm": client_side / "sha_js" / "sha.wasm"}


def inputs(seed: int) -> dict[str, Any]:
    return {"in": [(seed >> (i % 16)) & 1 for i in range(BITS)]}


def prove_and_verify(client: Client, snarkjs: Path, folder: Path, seed: int) -> None:
    job_id = client.submit("circom", circuit="sha", witnesses=[inputs(seed)])
    (view,) = wait_done(client, [job_id])
    assert view.state == "done", view.error
    proof = client.proof(job_id, wait=60)
    assert proof is not None
    key = client.verification_key("circom", circuit="sha")
    (part,) = proof.partitions
    said = snarkjs_verify(snarkjs, folder / job_id, key, part.proof, part.public)
    assert "OK!" in said, said


def test_a_circuit_uploaded_from_elsewhere_proves_and_snarkjs_verifies(
    tmp_path_factory: pytest.TempPathFactory, sha256: dict[str, Path], snarkjs: Path, client_side: Path
) -> None:
    daemon = start_daemon(tmp_path_factory, "upload", token=TOKEN, extra_config=LEAN)
    try:
        with Client(daemon.url, TOKEN) as client:
            with pytest.raises(DaemonError) as refused:  # the daemon may not read the client's folder
                client.register_circuit("sha", sha256["zkey"], wasm=sha256["wasm"])
            assert refused.value.status == 403
            info = client.upload_circuit("sha", sha256["zkey"], wasm=sha256["wasm"])
            assert info.has_witness_generator and info.digest == circuit_digest(
                sha256["zkey"], sha256["wasm"]
            )
            prove_and_verify(client, snarkjs, client_side / "verify", seed=0xBEEF)
    finally:
        daemon.stop()


def test_the_fleet_registers_one_upload_on_three_daemons(
    tmp_path_factory: pytest.TempPathFactory, sha256: dict[str, Path], snarkjs: Path, client_side: Path
) -> None:
    names = ("one", "two", "three")
    daemons = [start_daemon(tmp_path_factory, n, token=TOKEN, extra_config=LEAN) for n in names]
    home = tmp_path_factory.mktemp("upload-fleet")
    tables = [
        f'[[daemons]]\nname = "{n}"\nurl = "{d.url}"\ntoken = "{TOKEN}"\n'
        for n, d in zip(names, daemons, strict=True)
    ]
    (home / "fleet.toml").write_text('token = "fleet-token"\n\n' + "\n".join(tables))
    fleet = FleetProcess(home / "fleet.toml", home / "fleet.log")
    try:
        digest = circuit_digest(sha256["zkey"], sha256["wasm"])
        with sha256["zkey"].open("rb") as zkey, sha256["wasm"].open("rb") as wasm:
            answer = httpx.put(
                f"{fleet.url}/fleet/circuits/sha", params={"digest": digest},
                files=[("zkey", ("sha.zkey", zkey)), ("wasm", ("sha.wasm", wasm))],
                headers={"Authorization": "Bearer fleet-token"}, timeout=TIMEOUT,
            )  # fmt: skip
        assert answer.status_code == 200, answer.text
        assert {n: o["ok"] for n, o in answer.json()["daemons"].items()} == dict.fromkeys(names, True)
        held = httpx.get(f"{fleet.url}/fleet/circuits", timeout=30).json()["circuits"]
        assert held == [{"name": "sha", "digest": digest, "daemons": dict.fromkeys(names, "holds")}]
        for i, daemon in enumerate(daemons):
            with Client(daemon.url, TOKEN) as client:
                prove_and_verify(client, snarkjs, client_side / f"fleet-{i}", seed=i + 1)
    finally:
        fleet.stop()
        for daemon in daemons:
            daemon.stop()


def _body(boundary: str, size: int) -> Iterator[bytes]:
    yield f'--{boundary}\r\nContent-Disposition: form-data; name="zkey"; filename="big.zkey"\r\n\r\n'.encode()
    chunk = b"\xab" * (1 << 20)
    sent = 0
    while sent < size:
        part = chunk[: min(len(chunk), size - sent)]
        sent += len(part)
        yield part
    yield f"\r\n--{boundary}--\r\n".encode()


def test_a_100_mb_upload_streams_in_bounded_memory_and_leaves_nothing(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    daemon = start_daemon(tmp_path_factory, "rss", token=TOKEN, extra_config=LEAN)
    try:
        process = psutil.Process(daemon.pid)
        http = httpx.Client(base_url=daemon.url, timeout=60)
        for _ in range(5):  # warm: the routes once each, so their first use costs nothing below
            http.get("/status").raise_for_status()
        idle = process.memory_info().rss
        peak, answered, done = idle, 0, threading.Event()

        def watch() -> None:
            nonlocal peak, answered
            with httpx.Client(base_url=daemon.url, timeout=60) as other:
                while not done.is_set():
                    peak = max(peak, process.memory_info().rss)
                    answered += other.get("/status").status_code == 200
                    done.wait(0.1)

        watcher = threading.Thread(target=watch)
        watcher.start()
        boundary = "rss-boundary"
        head = len(next(_body(boundary, 0)))
        length = head + UPLOAD_BYTES + len(f"\r\n--{boundary}--\r\n")
        try:
            answer = http.put(
                "/v1/circuits/big", params={"digest": hashlib.sha256(b"other").hexdigest()},
                content=_body(boundary, UPLOAD_BYTES), timeout=TIMEOUT,
                headers={"Authorization": f"Bearer {TOKEN}", "Content-Length": str(length),
                         "Content-Type": f"multipart/form-data; boundary={boundary}"},
            )  # fmt: skip
        finally:
            done.set()
            watcher.join()
        after = process.memory_info().rss
        print(f"daemon RSS: idle {idle / 2**20:.1f} MiB, peak {peak / 2**20:.1f} MiB during the upload, "
              f"{after / 2**20:.1f} MiB after; /status answered {answered} times meanwhile")  # fmt: skip
        assert answer.status_code == 422, answer.text
        assert "the upload's SHA-256" in answer.json()["detail"]
        assert peak - idle < RSS_GROWTH_BOUND
        assert answered > 0
        assert list((daemon.data_dir / "circuits").glob("*")) == []
        assert http.get("/v1/circuits").json() == []
        http.close()
    finally:
        daemon.stop()
