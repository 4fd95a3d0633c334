"""A `prooflane serve` child process on a free port (for `prooflane demo`, `prooflane bench`, tests)."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path
from types import TracebackType
from typing import IO

from ..errors import DaemonUnreachable

__all__ = ["READY_PREFIX", "DaemonProcess"]

READY_PREFIX = "prooflane listening on "
"""`prooflane serve` prints this, then its URL, on standard output once it accepts jobs."""


class DaemonProcess:
    """Start `prooflane serve` on 127.0.0.1 (by default on a free port) and learn its URL when ready.

    Standard error goes to ``log_path`` (default: ``daemon.log`` in the data folder). The daemon runs in its
    own session (a Ctrl-C in the terminal reaches this process, which stops it in order) and watches this
    process: if it ends without stopping the daemon, the daemon shuts down by itself.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        profile: str | None = "tiny",
        config_file: Path | None = None,
        log_path: Path | None = None,
        port: int = 0,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.port = port
        self.profile = profile
        self.config_file = config_file
        self.log_path = log_path or self.data_dir / "daemon.log"
        self.url = ""
        self._process: subprocess.Popen[str] | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._pump: threading.Thread | None = None

    def command(self) -> list[str]:
        """The command line that starts the daemon."""
        args = [sys.executable, "-c", "from prooflane.cli import main; main()", "serve"]
        args += ["--data", str(self.data_dir), "--host", "127.0.0.1", "--port", str(self.port)]
        args += ["--parent-pid", str(os.getpid())]  # it shuts down if this process ends without stopping it
        if self.profile is not None:
            args += ["--profile", self.profile]
        if self.config_file is not None:
            args += ["--config", str(self.config_file)]
        return args

    def start(self, timeout: float = 300.0) -> str:
        """Start the daemon and return its URL once it accepts jobs (again after ``kill`` or ``stop``: on a
        fixed ``port``, at the same URL)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("a")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self._process = subprocess.Popen(
            self.command(), stdout=subprocess.PIPE, stderr=log, text=True, env=env, start_new_session=True
        )
        log.close()
        assert self._process.stdout is not None
        self._lines = queue.Queue()  # a queue per start: the last process's end-of-output is not this one's
        self._pump = threading.Thread(target=_pump, args=(self._process.stdout, self._lines), daemon=True)
        self._pump.start()
        self.url = self._wait_ready(timeout)
        return self.url

    def _wait_ready(self, timeout: float) -> str:
        while True:
            try:
                line = self._lines.get(timeout=timeout)
            except queue.Empty:
                self.kill()
                raise DaemonUnreachable(
                    f"the daemon did not become ready in {timeout:g} s; see {self.log_path}"
                ) from None
            if line is None:
                code = self._process.wait() if self._process else None
                raise DaemonUnreachable(
                    f"the daemon exited ({code}) before it was ready; see {self.log_path}"
                )
            if line.startswith(READY_PREFIX):
                return line.removeprefix(READY_PREFIX).strip()

    @property
    def pid(self) -> int:
        """The daemon's process id."""
        assert self._process is not None, "not started"
        return self._process.pid

    @property
    def running(self) -> bool:
        """True while the process has not exited."""
        return self._process is not None and self._process.poll() is None

    def kill(self) -> None:
        """SIGKILL the daemon (no shutdown at all), reap it, then end what it left running."""
        if self.running:
            assert self._process is not None
            self._process.kill()
            self._process.wait()
        self._end_leftovers()
        self._close_pipe()

    def stop(self, timeout: float = 60.0, sig: int = signal.SIGTERM) -> int:
        """Send ``sig`` (SIGTERM, or SIGINT like Ctrl-C) and wait for the daemon's clean exit; SIGKILL it
        if that takes over ``timeout``. Returns its exit status."""
        if self._process is None:
            return 0
        if self._process.poll() is None:
            self._process.send_signal(sig)
            try:
                self._process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self._end_leftovers()
        self._close_pipe()
        return self._process.returncode

    def _end_leftovers(self) -> None:
        """SIGKILL whatever is left of the daemon's own process group (its workers, after a SIGKILL)."""
        if self._process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._process.pid, signal.SIGKILL)

    def _close_pipe(self) -> None:
        """After the process exited: let the reader thread see the end, then close the pipe."""
        if self._pump is not None:
            self._pump.join(timeout=10)
        if self._process is not None and self._process.stdout is not None:
            self._process.stdout.close()

    def log(self) -> str:
        """What the daemon wrote to standard error so far."""
        return self.log_path.read_text() if self.log_path.exists() else ""

    def __enter__(self) -> DaemonProcess:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _pump(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)
