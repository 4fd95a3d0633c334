"""Idle connections against a daemon whose open-files limit is the usual 1,024 (soft and hard): 1,100 of
them, unauthenticated, leave `/healthz` answering, a worker killed meanwhile is replaced, a job proves, and
the log holds no flood of accept errors."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import socket
import sys
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from prooflane.cli.daemon_process import DaemonProcess
from prooflane.client import Client
from prooflane.models import InlineSector
from prooflane.testing.faults import ProcessKind, daemon_tree
from tests.support.daemons import TIMEOUT, start_daemon, wait_done, wait_until

pytestmark = [pytest.mark.timeout(600)]

FILES = 1024  # the daemon's soft and hard limit of open files
IDLE = 1100  # idle connections: more than it could hold open


class FewFiles(DaemonProcess):
    """A daemon started with soft and hard limits of ``FILES`` open files (it cannot raise them)."""

    def command(self) -> list[str]:
        limit = (
            f"import os, resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, ({FILES}, {FILES})); "
            "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
        )
        return [sys.executable, "-c", limit, *super().command()[1:]]


def test_idle_connections_past_the_open_files_limit_leave_the_daemon_answering_and_proving(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < IDLE + 200:
        pytest.skip(f"this test opens {IDLE} sockets; its own hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, IDLE + 200), hard))
    # Idle clients are not cut off by the request deadline here: only the connection cap can make room.
    config = "request_timeout_secs = 3600\n"
    daemon = start_daemon(tmp_path_factory, "few-files", kind=FewFiles, extra_config=config)
    idle: list[socket.socket] = []
    try:
        limits = Path(f"/proc/{daemon.pid}/limits").read_text()
        assert any(line.startswith("Max open files") and f" {FILES} " in line for line in limits.splitlines())
        where = urlsplit(daemon.url)
        for _ in range(IDLE):  # connect, send nothing
            idle.append(socket.create_connection((where.hostname, where.port), timeout=TIMEOUT))

        answer = httpx.get(f"{daemon.url}/healthz", timeout=60)
        assert answer.status_code == 200, answer.text
        opened = len(os.listdir(f"/proc/{daemon.pid}/fd"))
        assert opened < FILES, f"the daemon holds {opened} descriptors of its {FILES}"

        with Client(daemon.url) as client:
            prover = next(p.pid for p in daemon_tree(daemon.pid) if p.kind is ProcessKind.PROVER)
            os.kill(prover, signal.SIGKILL)  # its replacement needs descriptors too
            wait_until(
                "a new prover",
                lambda: (
                    client.health()
                    and prover not in {p.pid for p in daemon_tree(daemon.pid) if p.kind is ProcessKind.PROVER}
                ),
            )
            [view] = wait_done(
                client, [client.submit("winning-post", sector=InlineSector(size=256, seed="0a"))]
            )
            assert view.state == "done", view.error
            assert daemon.running
    finally:
        for sock in idle:
            with contextlib.suppress(OSError):
                sock.close()
        daemon.stop()
    said = daemon.log()
    assert said.count("out of system resource") <= 1, said[-2000:]
    assert "Too many open files" not in said.replace("out of system resource", ""), said[-2000:]
