"""Dead workers on the dashboard, in a real browser: a restarting or lost worker is shown so, never idle.

The page is served by a real HTTP server with the dashboard's own files; ``/status`` answers with the text of
a real :class:`~prooflane.status.StatusTracker` whose workers died (no event stream: the page polls).
A live daemon cannot be held in this state on demand: its engine replaces a dead worker within a second.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from prooflane import events as ev
from prooflane.status.tracker import StatusTracker, TrackerConfig
from tests.support.browser import chromium

DASHBOARD = Path(__file__).resolve().parents[2] / "src" / "prooflane" / "dashboard"
TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".json": "application/json"}


def _tracker() -> StatusTracker:
    """Three workers on two devices: one idle, one restarting after a death, one lost; cpu1 has none live."""
    tracker = StatusTracker(TrackerConfig(sample_rss=False), strict=True)

    def send(cls: type[ev.EventBase], **fields: Any) -> None:
        event: Any = cls(at=tracker.records.seq + 1.0, **fields)
        tracker.apply(event)

    send(ev.WorkerRegistered, worker_id="cpu0/w0", device="cpu0")
    send(ev.WorkerRegistered, worker_id="cpu0/w1", device="cpu0")
    send(ev.WorkerRegistered, worker_id="cpu1/w0", device="cpu1")
    send(ev.WorkerDied, worker_id="cpu0/w1", reason="prover (pid 4242) exited: exit code -9")
    send(ev.WorkerDied, worker_id="cpu1/w0", reason="prover exited: exit code 255")
    send(ev.WorkerLost, worker_id="cpu1/w0", reason="3 failed starts: forkserver gone")
    return tracker


class _Handler(BaseHTTPRequestHandler):
    status_text = ""

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        if path == "/status":
            self._send(200, self.status_text.encode(), "application/json")
            return
        file = DASHBOARD / ("index.html" if path == "/" else path.lstrip("/"))
        if file.parent == DASHBOARD and file.is_file():
            self._send(200, file.read_bytes(), TYPES.get(file.suffix, "application/octet-stream"))
        else:
            self._send(404, b'{"detail": "not here"}', "application/json")

    def _send(self, code: int, body: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _synthesizing_tracker() -> StatusTracker:
    """A worker synthesizing its own partition of a circom job of 20 partitions (more than a job lists)."""
    tracker = StatusTracker(TrackerConfig(sample_rss=False), strict=True)

    def send(cls: type[ev.EventBase], **fields: Any) -> None:
        event: Any = cls(at=tracker.records.seq + 1.0, **fields)
        tracker.apply(event)

    send(ev.WorkerRegistered, worker_id="cpu0/w0", device="cpu0")
    send(ev.JobSubmitted, job_id="J" * 32, kind="circom", priority="normal", partitions=20, circuit="c")
    send(ev.SynthesisStarted, job_id="J" * 32, partition=0, worker_id="cpu0/w0")
    return tracker


@pytest.fixture
def page(request: pytest.FixtureRequest) -> Iterator[Page]:
    tracker = getattr(request, "param", _tracker)
    _Handler.status_text = tracker().snapshot().to_json_text()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with chromium() as browser:
            page = browser.new_page()
            page.goto(f"http://127.0.0.1:{server.server_address[1]}/")
            yield page
    finally:
        server.shutdown()
        server.server_close()


def test_restarting_and_lost_workers_are_shown_so_with_their_reason(page: Page) -> None:
    card = '[data-testid="worker-card"][data-worker-id="{}"]'
    idle, restarting, lost = (page.locator(card.format(w)) for w in ("cpu0/w0", "cpu0/w1", "cpu1/w0"))
    expect(idle).to_have_attribute("data-state", "idle")
    expect(restarting).to_have_attribute("data-state", "restarting")
    expect(restarting.get_by_test_id("worker-state")).to_have_text("restarting")
    expect(restarting.get_by_test_id("worker-last-known")).to_have_text(
        "prover (pid 4242) exited: exit code -9 (restarts: 1)"
    )
    expect(lost).to_have_attribute("data-state", "lost")
    expect(lost.get_by_test_id("worker-state")).to_have_text("lost")
    expect(lost.get_by_test_id("worker-last-known")).to_have_text(
        "3 failed starts: forkserver gone (restarts: 1)"
    )
    for dead in (restarting, lost):
        expect(dead.get_by_test_id("worker-busy")).to_have_text("—")
    colours = [el.evaluate("e => getComputedStyle(e).borderLeftColor") for el in (idle, restarting, lost)]
    assert len(set(colours)) == 3, colours  # each state its own colour: a dead card never looks idle
    devices = page.get_by_test_id("device")
    expect(devices.filter(has_text="cpu1")).to_contain_text("0 workers (1 down)")
    expect(devices.filter(has_text="cpu0")).to_contain_text("1 worker (1 down)")


@pytest.mark.parametrize("page", [_synthesizing_tracker], indirect=True)
def test_a_worker_synthesizing_its_own_partition_and_a_job_of_more_partitions_than_listed(page: Page) -> None:
    """The worker is shown busy synthesizing, with the partition; a job of 20 partitions shows the 16 it
    lists and says what the other 4 are."""
    card = page.locator('[data-testid="worker-card"][data-worker-id="cpu0/w0"]')
    expect(card).to_have_attribute("data-state", "synthesizing")
    expect(card.get_by_test_id("worker-job")).to_have_text("J" * 32)
    expect(card.get_by_test_id("worker-partition")).to_have_text("0")
    row = page.locator(f'[data-testid="pipeline-row"][data-job-id="{"J" * 32}"]')
    expect(row.get_by_test_id("partition-cell")).to_have_count(16)
    expect(row.get_by_test_id("job-more")).to_have_text("4 more partitions not listed: 4 pending")
    idle = card.evaluate("e => getComputedStyle(e).borderLeftColor")
    assert idle != "rgb(154, 163, 176)"  # not the idle card's colour
