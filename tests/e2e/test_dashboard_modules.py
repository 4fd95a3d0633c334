"""The dashboard's ES modules, in a real browser (Debian's chromium driven by Playwright): the event names it
subscribes to are the Python side's, and every module its pages import is served, by the daemon at ``/`` and
by the fleet at ``/d/<name>/`` and ``/assets/<name>``.

An import of a file the server does not serve breaks the whole module graph without a word on the page (no
module of it runs), so these tests load each page in a real browser against the real apps and require that
every request succeeded, nothing was logged as an error and the page rendered the daemon's data. The daemon is
an in-process engine behind the real app (``engine_support.served``); the fleet is the real fleet app, in this
process too.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import threading
import time
from collections.abc import Callable, Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import uvicorn
from playwright.sync_api import Browser, ConsoleMessage, Page, Request, Response
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from prooflane import events as ev
from prooflane.config import Config
from prooflane.fleet import Fleet, create_fleet_app
from prooflane.fleet.config import DaemonSpec, FleetConfig
from prooflane.server import bind
from prooflane.states import TERMINAL_JOB_STATES, JobState
from prooflane.status.feed import RESYNC
from tests.support.engine import Served, served

DASHBOARD = Path(__file__).resolve().parents[2] / "src" / "prooflane" / "dashboard"
MODULES = frozenset(p.name for p in DASHBOARD.glob("*.js"))
WAIT_SECS = 60.0  # how long any one wait may take before the test fails (never asserted as a timing)
# Being deleted from prooflane.events as dead code (never emitted): the dashboard no longer lists it.
BEING_REMOVED = frozenset({"partition_skipped"})
# What EventSource names a frame that has no `event:` line.
UNNAMED_FRAME = "message"
# The frames of the fleet's event stream for a daemon's panel (GET /d/<name>/v1/events).
PANEL_SNAPSHOT = "snapshot"


# --- the event names -----------------------------------------------------------------------------


class _Files(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def files() -> Iterator[str]:
    """The dashboard's folder over HTTP, nothing else (a module cannot be imported from file://)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Files, directory=str(DASHBOARD)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_event_names_are_the_trackers_and_the_feeds(browser: Browser, files: str) -> None:
    page = browser.new_page()
    page.goto(f"{files}/events.js")
    names: dict[str, list[str]] = page.evaluate("""async () => {
      const m = await import("./events.js");
      return { tracker: m.TRACKER_EVENTS, control: m.CONTROL_EVENTS, all: m.EVENT_NAMES };
    }""")
    page.close()
    # The daemon's /v1/events names each frame after its feed item: an event of the tracker, named as
    # EVENT_TYPES names it, or a resync; the fleet's stream for a daemon's panel sends "snapshot" frames (the
    # fleet test below reads one).
    tracker = set(ev.EVENT_TYPES) - BEING_REMOVED
    control = {PANEL_SNAPSHOT, RESYNC, UNNAMED_FRAME}
    assert sorted(names["tracker"]) == sorted(tracker)
    assert sorted(names["control"]) == sorted(control)
    assert sorted(names["all"]) == sorted(tracker | control)  # each name once


def test_the_pages_finished_states_are_the_terminal_job_states(browser: Browser, files: str) -> None:
    page = browser.new_page()
    page.goto(f"{files}/states.js")
    shown: list[str] = page.evaluate('async () => (await import("./states.js")).TERMINAL_JOB_STATES')
    page.close()
    assert sorted(shown) == sorted(state.value for state in TERMINAL_JOB_STATES)


# --- every module served -------------------------------------------------------------------------


class Watched:
    """What a page asked for and what went wrong on it: failed requests, error answers, errors logged to
    the console and uncaught exceptions."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.scripts: dict[str, int] = {}  # path of each script fetched -> HTTP status
        self.problems: list[str] = []
        page.on("console", self._console)
        page.on("pageerror", lambda exc: self.problems.append(f"uncaught: {exc}"))
        page.on("requestfailed", self._failed)
        page.on("response", self._response)

    def _console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.problems.append(f"console: {message.text}")

    def _failed(self, request: Request) -> None:
        if request.resource_type in ("fetch", "eventsource") and request.failure == "net::ERR_ABORTED":
            return  # the page gave up on a slow answer (it retries): the freshness tests cover that
        self.problems.append(f"request failed: {request.url} ({request.failure})")

    def _response(self, response: Response) -> None:
        path = urlsplit(response.url).path
        if response.status >= 400:
            self.problems.append(f"HTTP {response.status}: {response.url}")
        if response.request.resource_type == "script":
            self.scripts[path] = response.status
            kind = response.headers.get("content-type", "")
            if "javascript" not in kind:
                self.problems.append(f"{path} served as {kind!r}: not a module script")

    def modules(self, prefix: str) -> set[str]:
        """The names of the scripts fetched from under ``prefix``."""
        return {path.removeprefix(prefix) for path in self.scripts if path.startswith(prefix)}

    def until(self, expression: str) -> None:
        """Wait until ``expression`` holds on the page; fail at the first problem (an import of a file not
        served stops every module of the page, so the page would only wait forever)."""
        deadline = time.monotonic() + WAIT_SECS
        while True:
            assert self.problems == [], f"waiting for {expression}"
            try:
                self.page.wait_for_function(expression, timeout=250)
                return
            except PlaywrightTimeout:
                if time.monotonic() > deadline:
                    pytest.fail(f"gave up waiting for {expression}")

    def check(self) -> None:
        """Nothing went wrong so far; then close the page (its event stream ends, not a failure)."""
        problems = list(self.problems)
        self.page.close()
        assert problems == []


@pytest.fixture
def daemon(engine_config: Callable[..., Config], sector: Path) -> Iterator[Served]:
    """An engine behind the daemon's real app (dashboard included), with one finished job to show."""
    with served(engine_config(), sector=sector) as live:
        assert live.done(live.submit("winning-post")) is JobState.DONE
        yield live


def _snapshot(url: str) -> dict[str, Any]:
    answer = httpx.get(f"{url}/status", timeout=10)
    answer.raise_for_status()
    snapshot: dict[str, Any] = answer.json()
    return snapshot


def _open_dashboard(browser: Browser, url: str) -> Watched:
    """The dashboard at ``url`` once it rendered a fresh snapshot with a finished job and a live event
    stream."""
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    watched = Watched(page)
    page.goto(url)
    watched.until(
        "document.body.dataset.stale === 'false' && document.body.dataset.seq !== '' && "
        "document.body.dataset.connection === 'live' && "
        "document.querySelectorAll('[data-testid=\"history-row\"]').length > 0"
    )
    return watched


def _check_rendered(page: Page, snapshot: dict[str, Any]) -> None:
    """The page shows the daemon's data: each panel's module ran."""
    assert page.get_by_test_id("version").inner_text() == snapshot["version"]
    assert page.get_by_test_id("boot-id").inner_text() == snapshot["boot_id"]
    assert page.get_by_test_id("invariants").inner_text() == "ok"
    products = snapshot["products"]  # beside each curve's arithmetic, where the C extension says them
    shown = {
        c: f"{a} · {products[c]}" if products.get(c, "libraries") != "libraries" else a
        for c, a in snapshot["arithmetic"].items()
    }
    said = set(shown.values())  # the same on every curve here, or each curve's
    assert page.get_by_test_id("arithmetic").inner_text() == (
        said.pop() if len(said) == 1 else ", ".join(f"{c} {a}" for c, a in shown.items())
    )
    assert set(products) == set(snapshot["arithmetic"]) and products["bn128"] in (
        "avx512-ifma",
        "mulx",
        "portable",
    )
    assert " held (" in page.get_by_test_id("memory-text").inner_text()
    assert page.get_by_test_id("synthesis-active").inner_text().endswith(" active")
    assert page.get_by_test_id("device").count() == len(snapshot["devices"]) > 0
    assert page.get_by_test_id("worker-card").count() == len(snapshot["workers"]) > 0
    job = snapshot["recent_jobs"][0]
    row = page.locator(f'[data-testid="history-row"][data-key="{job["job_id"]}"]').locator("td")
    assert row.all_text_contents()[:2] == [job["job_id"], job["proof_kind"]]
    for chart in ("chart-proofs", "chart-busy", "chart-phases"):
        assert page.get_by_test_id(chart).locator("svg").count() == 1, chart
    assert page.get_by_test_id("phase-summary").inner_text().startswith("mean of ")


def test_the_daemon_serves_every_module_the_dashboard_imports(daemon: Served, browser: Browser) -> None:
    watched = _open_dashboard(browser, f"{daemon.url}/")
    assert watched.modules("/") == MODULES  # every module reached, and only those: no file left unused
    assert set(watched.scripts.values()) == {200}
    _check_rendered(watched.page, _snapshot(daemon.url))
    assert watched.page.evaluate("window.prooflane.snapshot.boot_id") == _snapshot(daemon.url)["boot_id"]
    listened = watched.page.evaluate('async () => (await import("./events.js")).TRACKER_EVENTS')
    watched.check()

    # The daemon's event stream names its frames as the page listens for.
    with httpx.stream("GET", f"{daemon.url}/v1/events", timeout=WAIT_SECS) as stream:
        daemon.submit("winning-post")
        name = next(line for line in stream.iter_lines() if line.startswith("event: "))
    assert name.removeprefix("event: ") in listened, name


@contextlib.contextmanager
def fleet_serving(config: FleetConfig, saved: Path) -> Iterator[str]:
    """The fleet's real app, following ``config``'s daemons and served by uvicorn on a free port of
    127.0.0.1 from an event loop in a thread, until the block ends; its URL."""
    sock = bind("127.0.0.1", 0)
    loop = asyncio.new_event_loop()
    up: concurrent.futures.Future[None] = concurrent.futures.Future()
    stop = asyncio.Event()

    async def serve() -> None:
        fleet = Fleet(config, saved)
        server = uvicorn.Server(uvicorn.Config(create_fleet_app(fleet), lifespan="off", log_level="warning"))
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        try:
            await fleet.start()
            up.set_result(None)
            await stop.wait()
        except BaseException as exc:
            if not up.done():
                up.set_exception(exc)
            raise
        finally:
            fleet.closing.set()  # ends the panels' event streams
            server.should_exit = True
            await serving
            await fleet.close()

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),))
    thread.start()
    try:
        up.result(WAIT_SECS)
        host, port = sock.getsockname()[:2]
        yield f"http://{host}:{port}"
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join()
        loop.close()
        sock.close()


def test_the_fleet_serves_every_module_its_page_and_the_panels_import(
    daemon: Served, browser: Browser, tmp_path: Path
) -> None:
    config = FleetConfig(poll_secs=0.2, timeout_secs=2.0, daemons=(DaemonSpec(name="a", url=daemon.url),))
    with fleet_serving(config, tmp_path / "fleet.toml") as fleet:
        # The fleet page: its own module, and the dashboard's dom.js and format.js from /assets/.
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        watched = Watched(page)
        page.goto(f"{fleet}/")
        watched.until(
            "document.body.dataset.stale === 'false' && "
            "document.querySelector('tr.daemon[data-name=\"a\"]')?.dataset.health === 'up'"
        )
        assert watched.modules("/") == {"fleet.js", "assets/dom.js", "assets/format.js"}
        assert set(watched.scripts.values()) == {200}
        snapshot = _snapshot(daemon.url)
        workers = len(snapshot["workers"])
        row = page.locator('tr.daemon[data-name="a"]')
        # The row's numbers are written with dom.js and format.js.
        assert row.get_by_test_id("d-workers").inner_text().endswith(f"/ {workers}")
        assert row.get_by_test_id("d-memory").inner_text().endswith(("B", "KiB", "MiB", "GiB", "TiB"))
        assert page.get_by_test_id("total-up").inner_text() == "1 / 1"
        watched.check()

        # A daemon's panel: the whole dashboard, every module from under /d/<name>/.
        panel = _open_dashboard(browser, f"{fleet}/d/a/")
        assert panel.modules("/d/a/") == MODULES
        assert set(panel.scripts.values()) == {200}
        _check_rendered(panel.page, snapshot)
        listened = panel.page.evaluate('async () => (await import("./events.js")).EVENT_NAMES')
        panel.check()

        # The panel's event stream names its frames as the page listens for.
        with httpx.stream("GET", f"{fleet}/d/a/v1/events", timeout=WAIT_SECS) as stream:
            daemon.submit("winning-post")  # a new snapshot for the fleet to announce
            name = next(line for line in stream.iter_lines() if line.startswith("event: "))
        assert name == f"event: {PANEL_SNAPSHOT}" and PANEL_SNAPSHOT in listened
