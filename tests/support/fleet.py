"""The fleet's end-to-end helpers: `prooflane fleet` as a child process, and Debian's sshd on a loopback port
(a second "machine" reached over SSH, as the fleet's SSH path and its deploys use it)."""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

from prooflane.cli.fleet import FLEET_READY_PREFIX
from tests.support.daemons import free_port, wait_until

SSHD = Path("/usr/sbin/sshd")


class FleetProcess:
    """`prooflane fleet` as a child process; its URL from the line it prints when ready."""

    def __init__(self, config: Path, log: Path, env: dict[str, str] | None = None) -> None:
        command = [sys.executable, "-c", "from prooflane.cli import main; main()", "fleet"]
        command += ["--config", str(config), "--port", "0"]
        self.config_path = config
        self.log_path = log
        with log.open("ab") as err:
            environment = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
            self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err, text=True,
                                            env=environment)  # fmt: skip
        lines: queue.Queue[str] = queue.Queue()
        assert self.process.stdout is not None
        self._pump = threading.Thread(target=_pump, args=(self.process.stdout, lines), daemon=True)
        self._pump.start()
        while True:
            line = lines.get(timeout=120)
            if line.startswith(FLEET_READY_PREFIX):
                self.url = line.removeprefix(FLEET_READY_PREFIX).strip()
                return
            if line == "":
                pytest.fail(f"the fleet exited before it was ready:\n{log.read_text()}")

    def status(self) -> dict[str, Any]:
        document: dict[str, Any] = httpx.get(f"{self.url}/fleet/status", timeout=10).json()
        return document

    def entry(self, name: str) -> dict[str, Any]:
        (found,) = [e for e in self.status()["daemons"] if e["name"] == name]
        entry: dict[str, Any] = found
        return entry

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._pump.join(10)
        assert self.process.stdout is not None
        self.process.stdout.close()


def _pump(stream: IO[str], lines: queue.Queue[str]) -> None:
    for line in stream:
        lines.put(line)
    lines.put("")


class Sshd:
    """Debian's sshd on a loopback port with a throwaway host key, user key and sshd_config."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.port = free_port()
        keygen = shutil.which("ssh-keygen")
        assert keygen is not None
        for key in ("host", "user"):
            subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-f", str(home / key)], check=True)
        (home / "authorized_keys").write_text((home / "user.pub").read_text())
        host_key = (home / "host.pub").read_text().split()
        self.known_hosts_line = f"[127.0.0.1]:{self.port} {host_key[0]} {host_key[1]}\n"
        (home / "sshd_config").write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {home / 'host'}\n"
            f"PidFile {home / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {home / 'authorized_keys'}\nStrictModes no\nUsePAM no\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n"
            "AllowTcpForwarding yes\nAllowStreamLocalForwarding yes\nPermitRootLogin prohibit-password\n"
        )  # fmt: skip
        if os.geteuid() == 0:
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation folder
        self.log = (home / "sshd.log").open("ab")
        self.process = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(home / "sshd_config")],
                                        stdout=self.log, stderr=self.log)  # fmt: skip
        wait_until("sshd to listen", self._listening, timeout=30)

    def _listening(self) -> bool:
        if self.process.poll() is not None:
            pytest.fail(f"sshd exited: {(self.home / 'sshd.log').read_text()}")
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", self.port)) == 0

    def options(self) -> list[str]:
        # Only options of the fleet's allowlist (a config file, -F, is refused: it could name a program; the
        # known hosts file is the fleet's own: its `ssh_known_hosts_file`, which :meth:`trust` fills).
        return ["-p", str(self.port), "-i", str(self.home / "user"), "-o", "IdentitiesOnly=yes"]

    def trust(self, known_hosts: Path) -> None:
        """Add this sshd's host key to ``known_hosts`` (a fleet's ``ssh_known_hosts_file``)."""
        with known_hosts.open("a") as out:
            out.write(self.known_hosts_line)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)
        self.log.close()


@contextlib.contextmanager
def sshd_on_loopback(factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    """A started :class:`Sshd` (skips the test when Debian's sshd or ssh is missing), stopped after."""
    if not SSHD.exists() or shutil.which("ssh") is None:
        pytest.skip(
            "Debian's openssh-server (/usr/sbin/sshd) and openssh-client are missing: run `make setup`"
        )
    server = Sshd(factory.mktemp("sshd"))
    try:
        yield server
    finally:
        server.stop()
