"""`prooflane service`: a daemon run from a folder as a detached, supervised process, on the host itself.

This is what `prooflane fleet deploy` runs over SSH; an operator on the host can run it too. The folder
(``--dir``) holds ``prooflane.toml`` (the daemon's config), ``service.pid`` (the supervisor), ``daemon.pid``
(the daemon it runs) and ``service.log`` (the supervisor's lines and the daemon's standard error; the
daemon's own log is ``prooflane.log`` in its data folder).

- ``start``: refuses while a supervisor of the folder runs or the daemon's port is held (naming the
  holder), starts the supervisor (as a systemd user unit where the user's manager outlives the session,
  :mod:`.user_unit`; else as a process in a session of its own, so it outlives the SSH session that
  started it), and waits until the daemon's ``/healthz`` says it can work.
- ``run`` (hidden): the supervisor. It starts ``prooflane serve`` in a session of its own, starts it
  again with backoff when it dies, and on SIGTERM stops it: SIGTERM to the daemon's process group, SIGKILL
  after ``--grace`` seconds, then waits until no process of that session is left.
- ``stop``: SIGTERM to the supervisor, then waits until the supervisor, every process of the daemon's
  session and the daemon's hold on its port are gone; a daemon left without its supervisor (one killed
  outright) is ended here the way the supervisor would have; says what is left when it cannot.
- ``restart``: stop, then start. ``status``: one line.

Each prints one line (``started: ...``, ``stopped: ...``, ``error: ...``) and exits 0 or 1.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, NoReturn

import httpx
import psutil
import typer

from ..config import Config
from .app import app
from .output import REFUSED, print_error
from .user_unit import UnitError, start_unit, stop_unit, unusable

__all__ = ["ServiceFolder", "end_session", "service_app"]

service_app = typer.Typer(
    help="Run a daemon from a folder as a supervised background process (what `prooflane fleet deploy` "
    "starts on a host).",
    no_args_is_help=True,
)
app.add_typer(service_app, name="service")

CONFIG_NAME = "prooflane.toml"
_CLI = "from prooflane.cli import main; main()"
_POLL_SECS = 0.2
_BACKOFF_MAX_SECS = 30.0
_STEADY_SECS = 60.0  # a daemon that ran this long before dying is started again after the shortest wait

Folder = Annotated[
    Path, typer.Option("--dir", metavar="DIR", help="The service folder (holds prooflane.toml).")
]
Wait = Annotated[
    float, typer.Option("--wait", metavar="SECS", help="How long to wait before saying it did not work.")
]
Grace = Annotated[
    float,
    typer.Option("--grace", metavar="SECS", help="How long the daemon may take to stop before SIGKILL."),
]


@dataclass(frozen=True)
class ServiceFolder:
    """The files of one service folder and the daemon's address from its config."""

    path: Path

    @property
    def config(self) -> Path:
        return self.path / CONFIG_NAME

    @property
    def supervisor_pidfile(self) -> Path:
        return self.path / "service.pid"

    @property
    def daemon_pidfile(self) -> Path:
        return self.path / "daemon.pid"

    @property
    def log(self) -> Path:
        return self.path / "service.log"

    def load(self) -> Config:
        return Config.load(self.config)

    def supervisor(self) -> psutil.Process | None:
        """The folder's supervisor while it runs (its pidfile names a live process of this service)."""
        return _alive(self.supervisor_pidfile, "service")

    def daemon_pid(self) -> int | None:
        return _read_pid(self.daemon_pidfile)


def _read_pid(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _alive(pidfile: Path, marker: str) -> psutil.Process | None:
    pid = _read_pid(pidfile)
    if pid is None:
        return None
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE or marker not in " ".join(process.cmdline()):
            return None  # a pid reused by another program, or one that ended and awaits its parent
        return process
    except psutil.Error:
        return None


def _write_pid(path: Path, pid: int) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(f"{pid}\n")
    os.replace(tmp, path)


# --- what is left of a daemon ----------------------------------------------------------------------


def session_processes(sid: int) -> list[psutil.Process]:
    """The live processes (zombies left out) of session ``sid``: a daemon started in a session of its own
    and everything it started (its workers, their helpers) unless they left it."""
    found = []
    for process in psutil.process_iter(["status"]):
        try:
            if process.info["status"] != psutil.STATUS_ZOMBIE and os.getsid(process.pid) == sid:
                found.append(process)
        except (OSError, psutil.Error):
            continue
    return found


def _port_holders(port: int) -> list[str]:
    """Who listens on TCP ``port`` (``pid 12 (python)``, or ``an unknown process`` when not ours to see)."""
    holders = []
    with contextlib.suppress(psutil.Error, OSError):
        for conn in psutil.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
                holders.append(_describe_pid(conn.pid) if conn.pid else "an unknown process")
    return holders


def _describe_pid(pid: int) -> str:
    try:
        process = psutil.Process(pid)
        state = " (zombie)" if process.status() == psutil.STATUS_ZOMBIE else ""
        return f"pid {pid} ({process.name()}){state}"
    except psutil.Error:
        return f"pid {pid}"


def port_free(host: str, port: int) -> bool:
    """Whether the daemon could bind ``host:port`` now (nothing listens there)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _leftovers(folder: ServiceFolder, config: Config) -> list[str]:
    """What is left of the folder's service, in words; empty when nothing is."""
    left = []
    supervisor = folder.supervisor()
    if supervisor is not None:
        left.append(f"supervisor pid {supervisor.pid} still runs")
    sid = folder.daemon_pid()
    if sid is not None:
        alive = session_processes(sid)
        if alive:
            named = ", ".join(_describe_pid(p.pid) for p in alive[:8])
            left.append(f"{len(alive)} process(es) of the daemon's session {sid} still alive: {named}")
    if not port_free(config.host, config.port):
        holders = ", ".join(_port_holders(config.port)) or "a process this user cannot see"
        left.append(f"port {config.port} is held by {holders}")
    return left


def end_session(sid: int, grace: float, reap: Callable[[], object] = lambda: None) -> None:
    """SIGTERM the process group ``sid`` (a daemon started in a session of its own, and its workers), SIGKILL
    whatever of the session is left after ``grace`` seconds, and wait until none of it is (10 s more at
    most: ``stop`` then says what is left). ``reap``: called while waiting, so that a parent collects its
    child (the supervisor's daemon) instead of leaving it a zombie."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(sid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while session_processes(sid) and time.monotonic() < deadline:
        reap()
        time.sleep(_POLL_SECS)
    deadline = time.monotonic() + 10.0
    while (left := session_processes(sid)) and time.monotonic() < deadline:
        for process in left:
            with contextlib.suppress(psutil.Error):
                process.kill()
        reap()
        time.sleep(_POLL_SECS)
    reap()


def _wait_gone(folder: ServiceFolder, config: Config, wait: float) -> list[str]:
    deadline = time.monotonic() + wait
    while (left := _leftovers(folder, config)) and time.monotonic() < deadline:
        time.sleep(_POLL_SECS)
    return left


# --- the supervisor ---------------------------------------------------------------------------------


class _Supervisor:
    """Runs ``prooflane serve`` for one folder until SIGTERM; all of its state is this one thread's."""

    def __init__(self, folder: ServiceFolder, grace: float) -> None:
        self.folder = folder
        self.grace = grace
        self.stopping = False
        self.child: subprocess.Popen[bytes] | None = None

    def note(self, text: str) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        print(f"{stamp} prooflane service: {text}", flush=True)

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        _write_pid(self.folder.supervisor_pidfile, os.getpid())
        backoff = 1.0
        try:
            while not self.stopping:
                started = time.monotonic()
                self.child = self._start()
                while self.child.poll() is None and not self.stopping:
                    time.sleep(_POLL_SECS)
                if self.stopping:
                    break
                self.note(f"daemon pid {self.child.pid} exited with {self.child.returncode}; "
                          f"starting it again in {backoff:.0f} s")  # fmt: skip
                # Its workers must not hold the port for the next one.
                end_session(self.child.pid, 0.0, reap=self.child.poll)
                backoff = 1.0 if time.monotonic() - started > _STEADY_SECS else backoff
                deadline = time.monotonic() + backoff
                while not self.stopping and time.monotonic() < deadline:
                    time.sleep(_POLL_SECS)
                backoff = min(backoff * 2, _BACKOFF_MAX_SECS)
        finally:
            if self.child is not None:
                end_session(self.child.pid, self.grace, reap=self.child.poll)
            self.folder.supervisor_pidfile.unlink(missing_ok=True)
            self.note("stopped")
        return 0

    def _on_signal(self, signum: int, frame: object) -> None:
        self.stopping = True  # read by the loop; nothing else is done inside the handler

    def _start(self) -> subprocess.Popen[bytes]:
        command = [sys.executable, "-c", _CLI, "serve", "--config", str(self.folder.config)]
        child = subprocess.Popen(command, cwd=self.folder.path, stdin=subprocess.DEVNULL,
                                 start_new_session=True)  # fmt: skip
        _write_pid(self.folder.daemon_pidfile, child.pid)
        self.note(f"daemon pid {child.pid} started")
        return child


@service_app.command("run", hidden=True)
def run(folder: Folder, grace: Grace = 30.0) -> None:
    """Supervise the folder's daemon in the foreground until SIGTERM."""
    raise typer.Exit(_Supervisor(ServiceFolder(folder.resolve()), grace).run())


# --- start, stop, restart, status --------------------------------------------------------------------


def _fail(message: str) -> NoReturn:
    print_error(message)
    raise typer.Exit(REFUSED)


def _loaded(folder: ServiceFolder) -> Config:
    try:
        return folder.load()
    except Exception as exc:  # a missing or bad config: said in one line
        _fail(f"{folder.config}: {exc}")


def _health_url(config: Config) -> str:
    host = "127.0.0.1" if config.host in ("0.0.0.0", "", "::") else config.host
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{config.port}/healthz"


def _last_log_line(folder: ServiceFolder) -> str:
    try:
        lines = [line for line in folder.log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1].strip()[:300] if lines else ""


def _start(folder: ServiceFolder, wait: float, grace: float) -> None:
    config = _loaded(folder)
    supervisor = folder.supervisor()
    if supervisor is not None:
        _fail(f"{folder.path}: already running (supervisor pid {supervisor.pid}); stop it first")
    left = _leftovers(folder, config)
    if left:
        _fail(f"{folder.path}: cannot start: {'; '.join(left)}")
    command = [sys.executable, "-c", _CLI, "service", "run", "--dir", str(folder.path), "--grace", str(grace)]
    started: subprocess.Popen[bytes] | None = None
    why_not = unusable()
    if why_not is None:
        try:
            how = f"systemd user unit {start_unit(folder.path, command, grace)}"
        except UnitError as exc:
            _fail(f"{folder.path}: {exc}")
    else:
        how = f"detached: {why_not}"
        with folder.log.open("ab") as log:
            started = subprocess.Popen(command, cwd=folder.path, stdin=subprocess.DEVNULL, stdout=log,
                                       stderr=log, start_new_session=True)  # fmt: skip
    _wait_healthy(folder, config, wait, started, how)


def _wait_healthy(
    folder: ServiceFolder, config: Config, wait: float, started: subprocess.Popen[bytes] | None, how: str
) -> None:
    url, why = _health_url(config), "no answer yet"
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if started is not None and started.poll() is not None:
            _fail(f"the supervisor exited with {started.returncode}: {_last_log_line(folder)}")
        try:
            answer = httpx.get(url, timeout=2.0)
            if answer.status_code == 200:
                supervisor = folder.supervisor()
                print(f"started: daemon pid {folder.daemon_pid()} under supervisor pid "
                      f"{supervisor.pid if supervisor else '?'} ({how}); {url} says it can work",
                      flush=True)  # fmt: skip
                return
            why = str(answer.json().get("detail") or f"/healthz answered {answer.status_code}")
        except (httpx.HTTPError, ValueError) as exc:
            why = f"no answer ({type(exc).__name__})"
        time.sleep(_POLL_SECS * 2)
    _fail(f"not healthy after {wait:.0f} s ({why}); it still runs ({how}); last line of {folder.log}: "
          f"{_last_log_line(folder) or 'none'}")  # fmt: skip


def _stop(folder: ServiceFolder, wait: float) -> str:
    config = _loaded(folder)
    supervisor = folder.supervisor()
    sid = folder.daemon_pid()
    deadline = time.monotonic() + wait
    stop_unit(folder.path)  # a unit's supervisor is stopped by systemd, and not started again at boot
    if supervisor is not None:  # it stops its daemon itself; one that does not finish in time is killed
        try:
            supervisor.terminate()
            supervisor.wait(max(0.0, deadline - time.monotonic()))
        except psutil.TimeoutExpired:
            with contextlib.suppress(psutil.Error):
                supervisor.kill()
        except psutil.Error:
            pass
    if sid is not None and session_processes(sid):  # no supervisor ended it (killed, or out of time)
        end_session(sid, max(1.0, deadline - time.monotonic()))
    left = _wait_gone(folder, config, max(1.0, deadline - time.monotonic()))
    if left:
        _fail(f"{folder.path}: not stopped after {wait:.0f} s: {'; '.join(left)}")
    what = f"supervisor pid {supervisor.pid}" if supervisor is not None else "no supervisor was running"
    daemon = f"no process of daemon session {sid} left" if sid is not None else "no daemon was started here"
    return f"stopped: {what}; {daemon}; port {config.port} free"


@service_app.command()
def start(folder: Folder, wait: Wait = 300.0, grace: Grace = 30.0) -> None:
    """Start the folder's daemon under a detached supervisor; wait until /healthz says it can work."""
    _start(ServiceFolder(folder.resolve()), wait, grace)


@service_app.command()
def stop(folder: Folder, wait: Wait = 60.0) -> None:
    """Stop the supervisor and its daemon; wait until no process of it is left and its port is free."""
    print(_stop(ServiceFolder(folder.resolve()), wait), flush=True)


@service_app.command()
def restart(folder: Folder, wait: Wait = 300.0, grace: Grace = 30.0) -> None:
    """Stop (waiting as `stop` does), then start (waiting as `start` does)."""
    path = ServiceFolder(folder.resolve())
    print(_stop(path, max(grace, 10.0) + 30.0), flush=True)
    _start(path, wait, grace)


@service_app.command()
def status(folder: Folder) -> None:
    """One line: running (the supervisor's and the daemon's pids) or not, and what is left if not."""
    path = ServiceFolder(folder.resolve())
    config = _loaded(path)
    supervisor = path.supervisor()
    if supervisor is not None:
        print(f"running: supervisor pid {supervisor.pid}, daemon pid {path.daemon_pid()}, port {config.port}")
        return
    left = _leftovers(path, config)
    print(f"not running{': ' + '; '.join(left) if left else ''}")
    raise typer.Exit(REFUSED)
