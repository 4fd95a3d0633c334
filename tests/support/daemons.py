"""Helpers for the end-to-end tests: real `prooflane serve` processes, sectors, snarkjs verification."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from prooflane.cli.daemon_process import DaemonProcess
from prooflane.client import Client
from prooflane.models import JobView


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


KEYS_CACHE = "prooflane-dev-keys"
TIMEOUT = 240.0  # seconds any one wait may take before the test fails (never asserted as a timing)


def start_daemon(
    factory: pytest.TempPathFactory,
    name: str,
    *,
    token: str = "",
    data_dir: Path | None = None,
    port: int = 0,
    extra_config: str = "",
    kind: type[DaemonProcess] = DaemonProcess,
    profile: str = "tiny",
) -> DaemonProcess:
    """Start a `prooflane serve` (the tiny profile unless ``profile``) in a fresh data folder, reusing the
    dev keys an earlier daemon made: the one way the tests start a daemon process.

    ``extra_config`` is TOML added to the daemon's config file; ``port`` 0 takes a free one (a fixed port
    lets a test kill the daemon and start it again there); ``kind`` a subclass of DaemonProcess with the
    test's own helpers."""
    data = data_dir or factory.mktemp(name) / "data"
    seed_keys(factory, data)
    cache = factory.getbasetemp() / KEYS_CACHE
    config = data.parent / "prooflane.toml"
    # Sectors, witnesses and circuits of the tests live in the session's temporary folders.
    roots = json.dumps([str(factory.getbasetemp())])
    config.write_text(f"token = {json.dumps(token)}\nallowed_roots = {roots}\n{extra_config}")
    daemon = kind(data, profile=profile, config_file=config, log_path=data.parent / "daemon.log", port=port)
    try:
        daemon.start(timeout=TIMEOUT)
    except Exception:
        print(daemon.log())
        raise
    if not cache.exists() and (data / "keys").is_dir():
        shutil.copytree(data / "keys", cache)
    return daemon


def seed_keys(factory: pytest.TempPathFactory, data: Path) -> None:
    """Copy the dev keys an earlier daemon of this session made into ``data`` (a fresh daemon then skips
    making its own)."""
    cache = factory.getbasetemp() / KEYS_CACHE
    if cache.is_dir() and not (data / "keys").exists():
        shutil.copytree(cache, data / "keys")


def circom_files(folder: Path) -> dict[str, Path]:
    """A Groth16 .zkey (of the tiny winning-post circuit) and two .wtns files: one good, one that breaks a
    constraint (so a job proving it fails at that partition)."""
    from prooflane.circuits import Sector, partition_witness, storage_circuit
    from prooflane.groth16 import BN128, setup, write_wtns, write_zkey
    from prooflane.groth16.witness import Witness

    folder.mkdir(parents=True, exist_ok=True)
    circuit = storage_circuit("winning-post", "tiny", BN128)
    write_zkey(folder / "c.zkey", setup(circuit.r1cs, seed=b"e2e-circom"))
    witness = partition_witness(
        "winning-post", "tiny", Sector.create(folder / "s", 256, seed=5), b"r" * 32, 0, BN128
    )
    write_wtns(folder / "good.wtns", witness)
    values = witness.values.copy()
    values[-1, 0] ^= 1  # a private wire changed: its constraints no longer hold
    write_wtns(folder / "bad.wtns", Witness(BN128, values))
    return {"zkey": folder / "c.zkey", "good": folder / "good.wtns", "bad": folder / "bad.wtns"}


def running(daemon: DaemonProcess) -> Iterator[DaemonProcess]:
    """Yield the daemon, stop it afterwards, and show its log when the test failed."""
    try:
        yield daemon
    finally:
        code = daemon.stop()
        if code not in (0, None):
            print(daemon.log())


def wait_until(what: str, check: Callable[[], bool], timeout: float = TIMEOUT) -> None:
    """Poll ``check`` until it holds; fail naming ``what`` if it never does."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.05)


def wait_done(client: Client, job_ids: list[str]) -> list[JobView]:
    """Wait until every job is in a terminal state; return their views."""
    views: dict[str, JobView] = {}

    def all_ended() -> bool:
        for job_id in job_ids:
            if job_id not in views:
                view = client.job(job_id)
                if view.state.terminal:
                    views[job_id] = view
        return len(views) == len(job_ids)

    wait_until(f"jobs {job_ids} to end", all_ended)
    return [views[job_id] for job_id in job_ids]


def snarkjs_verify(
    snarkjs: Path, folder: Path, key: dict[str, Any], proof: dict[str, Any], public: list[str]
) -> str:
    """Run `snarkjs groth16 verify` on the three documents; return its output (OK! when valid)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, document in (("verification_key", key), ("public", public), ("proof", proof)):
        path = folder / f"{name}.json"
        path.write_text(json.dumps(document))
        paths.append(str(path))
    done = subprocess.run(
        [str(snarkjs), "groth16", "verify", *paths],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    return done.stdout + done.stderr
