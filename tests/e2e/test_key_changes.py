"""A key file changed on disk under a running daemon (`prooflane serve`, the process backend: workers map
the keys): rewritten in place or cut short, a registered circuit's is a missing key (its jobs refused with
why, health saying so, registering it again puts it back) and a built-in kind's is made again; no worker
process dies of it (SIGBUS, a panic on other bytes) and no job proves with it."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from prooflane.cli.daemon_process import DaemonProcess
from prooflane.client import Client
from prooflane.errors import DaemonError
from tests.support.daemons import TIMEOUT, circom_files, running, start_daemon

TOKEN = "key-token"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    yield from running(start_daemon(tmp_path_factory, "keys-changed", token=TOKEN))


def proved(client: Client, kind: str, **fields: object) -> None:
    job_id = client.submit(kind, **fields)  # type: ignore[arg-type]
    found = client.proof(job_id, wait=TIMEOUT)
    assert found is not None, client.job(job_id)


def restarts(client: Client) -> int:
    return sum(int(w.get("restarts", 0)) for w in client.status()["workers"])


def writable(path: Path) -> None:
    """The daemon's copy is read-only: what a careless operator (or root) gets past."""
    path.chmod(0o644)


def rewrite_in_place(path: Path) -> None:
    """Other bytes in the middle of the file, its size kept (what a careless copy over it does)."""
    writable(path)
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, b"\xff" * 4096, path.stat().st_size // 2)
    finally:
        os.close(fd)


def test_a_registered_key_changed_in_place_is_refused_until_registered_again(
    daemon: DaemonProcess, tmp_path: Path
) -> None:
    files = circom_files(tmp_path)
    with Client(daemon.url, TOKEN) as client:
        client.register_circuit("kept", files["zkey"])
        witness = [str(files["good"])]
        proved(client, "circom", circuit="kept", witnesses=witness)  # the workers map the key now
        kept = daemon.data_dir / "circuits" / "kept" / "circuit.zkey"
        assert stat.S_IMODE(kept.stat().st_mode) == 0o444  # the daemon's copy is read-only

        for change, says in ((rewrite_in_place, "rewritten in place"), (_cut_short, "rewritten in place")):
            change(kept)
            with pytest.raises(DaemonError) as refused:
                proved(client, "circom", circuit="kept", witnesses=witness)
            assert refused.value.status == 503
            assert "circuit 'kept': its key file" in refused.value.detail
            assert f"changed on disk since it was registered ({says}" in refused.value.detail
            assert "registered again" in (client.health_reason() or "")

            client.register_circuit("kept", files["zkey"])  # the same files: back
            assert client.health_reason() is None
            proved(client, "circom", circuit="kept", witnesses=witness)
        assert restarts(client) == 0
    assert "SIGBUS" not in daemon.log() and "killed by signal" not in daemon.log()


def _cut_short(path: Path) -> None:
    writable(path)
    os.truncate(path, path.stat().st_size // 3)


def test_a_built_in_key_cut_short_is_made_again_and_proves(daemon: DaemonProcess, sector: Path) -> None:
    with Client(daemon.url, TOKEN) as client:
        proved(client, "winning-post", sector=str(sector))
        key = next((daemon.data_dir / "keys").glob("winning-post-*.zkey"))
        _cut_short(key)
        proved(client, "winning-post", sector=str(sector))
        assert key.stat().st_size > 0 and restarts(client) == 0
    log = daemon.log()
    assert "the key of winning-post changed on disk" in log and "is made again" in log
    assert "SIGBUS" not in log and "killed by signal" not in log


@pytest.fixture(scope="module")
def sector(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from prooflane.circuits import Sector

    folder = tmp_path_factory.mktemp("sector") / "s1"
    Sector.create(folder, 256)
    return folder
