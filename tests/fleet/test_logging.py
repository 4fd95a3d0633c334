"""The fleet's log: one line when a daemon stops answering (with why), one when it answers again (with how
long it did not), never one per failed attempt; one per warning of a daemon's health, once per boot. Daemons
are the real engine behind the daemon's app over real HTTP (tests/support/engine.py); one is reached through
a TCP relay the test cuts and restores, so it comes back at the same address."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from prooflane.config import Config
from prooflane.fleet import Fleet
from prooflane.fleet.config import DaemonSpec, FleetConfig
from prooflane.fleet.follower import DaemonFollower
from tests.support.engine import served

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]
WAIT_SECS = 30.0  # how long any one wait may take before the test fails (never asserted as a timing)


def _config(*daemons: DaemonSpec) -> FleetConfig:
    return FleetConfig(port=0, poll_secs=0.1, timeout_secs=0.5, backoff_max_secs=0.2, daemons=daemons)


@pytest.fixture
async def fleets(tmp_path: Path) -> AsyncIterator[Callable[[FleetConfig], Fleet]]:
    """Start fleets (saving to tmp_path/fleet.toml) and close them after the test."""
    started: list[Fleet] = []

    def start(config: FleetConfig) -> Fleet:
        started.append(Fleet(config, tmp_path / "fleet.toml"))
        return started[-1]

    yield start
    for fleet in started:
        await fleet.close()


@pytest.fixture
def logged(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG, logger="prooflane")
    return caplog


def _lines(caplog: pytest.LogCaptureFixture, said: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "prooflane.fleet" and said in r.getMessage()]


async def _until(follower: DaemonFollower, check: Callable[[DaemonFollower], bool]) -> None:
    """Wait for the follower's next snapshots or failures until ``check`` holds."""
    async with asyncio.timeout(WAIT_SECS):
        while not check(follower):
            await follower.changed()


class Relay:
    """A TCP relay on 127.0.0.1 to ``target``'s port: ``cut()`` closes it and every connection through it
    (the daemon is unreachable), ``restore()`` listens again on the same port."""

    def __init__(self, target: str) -> None:
        self.target_port = urlsplit(target).port
        self.port = 0
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def restore(self) -> None:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def cut(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._open):
            writer.close()
        await self._server.wait_closed()
        self._server = None

    async def _relay(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            daemon_r, daemon_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            client_w.close()
            return
        self._open |= {client_w, daemon_w}
        try:
            await asyncio.gather(self._pipe(client_r, daemon_w), self._pipe(daemon_r, client_w))
        finally:
            self._open -= {client_w, daemon_w}
            client_w.close()
            daemon_w.close()

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()


async def test_a_stopped_daemon_is_one_unreachable_line_however_many_attempts_fail(
    engine_config: Callable[..., Config],
    fleets: Callable[[FleetConfig], Fleet],
    logged: pytest.LogCaptureFixture,
) -> None:
    with served(engine_config()) as daemon:
        fleet = fleets(_config(DaemonSpec(name="a", url=daemon.url)))
        await fleet.start()
        follower = fleet.followers["a"]
        await _until(follower, lambda f: f.snapshot is not None)
        url = daemon.url
    await _until(follower, lambda f: f.failures >= 4)
    [away] = _lines(logged, " unreachable: ")
    assert away.levelno == logging.WARNING
    assert away.getMessage() == f"daemon a ({url}) unreachable: {follower.last_error}"
    assert (away.daemon, away.where, away.reachable) == ("a", url, False)  # type: ignore[attr-defined]
    assert away.reason  # type: ignore[attr-defined]
    assert not _lines(logged, " back after ")


async def test_a_daemon_that_goes_away_and_comes_back_is_one_line_each_time(
    engine_config: Callable[..., Config],
    fleets: Callable[[FleetConfig], Fleet],
    logged: pytest.LogCaptureFixture,
) -> None:
    with served(engine_config()) as daemon:
        relay = Relay(daemon.url)
        await relay.restore()
        fleet = fleets(_config(DaemonSpec(name="a", url=relay.url)))
        await fleet.start()
        follower = fleet.followers["a"]
        await _until(follower, lambda f: f.snapshot is not None)
        assert not _lines(logged, "daemon a")  # the first answer is not news
        for times in (1, 2):
            await relay.cut()
            await _until(follower, lambda f: f.failures >= 3)
            assert len(_lines(logged, " unreachable: ")) == times
            await relay.restore()
            await _until(follower, lambda f: f.failures == 0)
            back = _lines(logged, " back after ")
            assert len(back) == times
            assert back[-1].levelno == logging.INFO
            assert back[-1].getMessage().startswith(f"daemon a ({relay.url}) back after ")
            assert back[-1].getMessage().endswith(" s away")
            assert back[-1].away_secs > 0 and back[-1].reachable is True  # type: ignore[attr-defined]
        await relay.cut()
        await _until(follower, lambda f: f.failures >= 1)
    said = [r.getMessage().split(")")[1].split(":")[0].split(" after")[0] for r in _lines(logged, "daemon a")]
    assert said == [" unreachable", " back"] * 2 + [" unreachable"]


async def test_a_daemon_on_the_libraries_is_one_warning_line_per_boot(
    engine_config: Callable[..., Config],
    fleets: Callable[[FleetConfig], Fleet],
    logged: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slow = {"bn128": "libraries: PROOFLANE_NATIVE=0", "bls12381": "libraries: PROOFLANE_NATIVE=0"}
    monkeypatch.setattr("prooflane.engine.engine.arithmetics", lambda: slow)  # what that process would find
    with served(engine_config()) as daemon:
        relay = Relay(daemon.url)
        await relay.restore()
        fleet = fleets(_config(DaemonSpec(name="a", url=relay.url)))
        await fleet.start()
        follower = fleet.followers["a"]
        await _until(follower, lambda f: f.snapshot is not None)
        await relay.cut()  # away and back: a snapshot of the same boot again, which says nothing new
        await _until(follower, lambda f: f.failures >= 1)
        await relay.restore()
        await _until(follower, lambda f: f.failures == 0)
        await relay.cut()
    warning = "bn128 and bls12381 prove on the libraries, the slower arithmetic (PROOFLANE_NATIVE=0)"
    [line] = _lines(logged, "slower arithmetic")
    assert len(_lines(logged, " back after ")) == 1
    assert line.levelno == logging.WARNING
    assert line.getMessage() == f"daemon a ({relay.url}): {warning}"
    assert (line.daemon, line.warning) == ("a", warning)  # type: ignore[attr-defined]
