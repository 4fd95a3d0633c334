"""``/status`` and the dashboard with 1,000 live jobs: the answer stays small, counts every job, lists what
holds work, is a 304 while nothing changed, and the dashboard renders it with every panel in its place.

The real engine (in-process backend, synthesis held so that the jobs stay queued, one partition
synthesizing) behind the real app and a uvicorn server; the dashboard in Debian's chromium. The render's
script time is written to ``test-output/<test>/render-ms.json``, not asserted (no test depends on the
machine's speed); docs/dashboard.md gives the figures.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import Browser

from prooflane.config import Config
from prooflane.testing.checks import check_journal
from tests.support.engine import WAIT, served

JOBS = 1000
MOST_BYTES = 128 << 10
KINDS = ("winning-post", "porep-c2", "window-post", "snap-update")
PRIORITIES = ("normal", "high", "normal", "critical")

PANELS = """() => Array.from(document.querySelectorAll("main > section")).map((s) => {
  const r = s.getBoundingClientRect();
  return { id: s.querySelector("h2").id, top: r.top + scrollY, height: r.height, shown: r.height > 0 };
})"""


def submit(url: str, sector: Path) -> list[str]:
    with httpx.Client(base_url=url, timeout=WAIT) as http:
        ids = []
        for n in range(JOBS):
            body = {"kind": KINDS[n % 4], "sector": str(sector), "priority": PRIORITIES[n % 7 % 4]}
            answer = http.post("/v1/jobs", json=body)
            assert answer.status_code == 202, answer.text
            ids.append(answer.json()["job_id"])
        return ids


def check_status(status: dict[str, Any], size: int, ids: list[str]) -> None:
    """Small, true on what it lists, and counting the rest."""
    assert size <= MOST_BYTES, f"/status is {size} bytes"
    assert status["invariants_ok"], status["invariant_violations"]
    live = status["live_jobs"]
    assert live["total"] == sum(g["jobs"] for g in live["groups"]) == JOBS
    assert sum(g["partitions_pending"] for g in live["groups"]) == status["counters"]["queue_depth"]
    listed = status["pipelines"]
    running = [p for p in listed if p["state"] == "running"]
    queued = [p["job_id"] for p in listed if p["state"] == "queued"]
    assert len(running) == live["running"] >= 1 and len(queued) == 20 and live["shown"] == len(listed)
    for worker in status["workers"]:  # a worker's partition is always listed
        if worker["current_job"] is not None:
            assert worker["current_job"] in {p["job_id"] for p in running}
    # the next to run: the most urgent first, then in submission order
    rank = {"critical": 0, "high": 1, "normal": 2}
    waiting = [j for j in ids if j not in {p["job_id"] for p in running}]
    priority = {j: PRIORITIES[n % 7 % 4] for n, j in enumerate(ids)}
    order = sorted(waiting, key=lambda j: (rank[priority[j]], ids.index(j)))
    assert sorted(queued, key=ids.index) == sorted(order[:20], key=ids.index)


def test_a_thousand_live_jobs_status_and_dashboard(
    engine_config: Callable[..., Config], sector: Path, browser: Browser, output_dir: Path
) -> None:
    config = engine_config()
    with served(config) as server:
        server.hold()  # no synthesis ends: the jobs stay queued (one partition synthesizing)
        ids = submit(server.url, sector)
        journal = config.data_dir / "journal.sqlite3"
        for _ in range(5):  # fresh connections
            answer = httpx.get(f"{server.url}/status", headers={"Accept-Encoding": "identity"}, timeout=WAIT)
            status = answer.json()
            check_status(status, len(answer.content), ids)
            assert check_journal(status, journal) == []
        with httpx.Client(base_url=server.url, timeout=WAIT) as http:  # kept alive
            first = http.get("/status")
            assert first.headers["content-encoding"] == "gzip"
            answers = [
                http.get("/status", headers={"If-None-Match": first.headers["etag"]}) for _ in range(3)
            ]
        # 304 while the tag stays; a journal check (every 5 s) moves it, and then the answer says so
        assert any(a.status_code == 304 for a in answers)
        assert all(a.status_code == 304 or a.headers["etag"] != first.headers["etag"] for a in answers)
        assert all(a.content == b"" for a in answers if a.status_code == 304)

        errors: list[str] = []
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"{server.url}/")
        page.wait_for_function("document.body.dataset.stale === 'false' && document.body.dataset.seq !== ''")
        page.wait_for_timeout(1000)  # the first render settles (fonts, the first chart)
        first_panels = page.evaluate(PANELS)
        settled = len(page.evaluate("window.prooflane.layoutShifts"))
        renders = len(page.evaluate("window.prooflane.renderMs"))
        page.wait_for_timeout(7000)  # four polls or more: 304s, and a new tag after a journal check (5 s)
        panels = page.evaluate(PANELS)
        assert panels == first_panels and all(p["shown"] for p in panels)  # every panel, in its place
        assert page.evaluate("window.prooflane.layoutShifts")[settled:] == []  # nothing moved between polls
        assert len(page.evaluate("window.prooflane.renderMs")) > renders  # and it rendered again meanwhile
        assert page.evaluate("document.body.dataset.stale") == "false"  # a 304 keeps the page fresh
        summary = page.locator('[data-testid="queue-summary"]').text_content() or ""
        assert summary.startswith("1,000 jobs in the live view:") and "(the next 20 listed)" in summary
        shown = page.evaluate("window.prooflane.snapshot.live_jobs")
        assert page.locator('[data-testid="queue-group"]').count() == len(shown["groups"])
        rows = page.locator('[data-testid="pipelines"] [data-testid="pipeline-row"]').count()
        assert rows == shown["shown"]  # every job listed, none of those only counted
        assert page.locator('[data-testid="queue-link"]').get_attribute("href") == "v1/jobs?state=queued"
        render_ms = page.evaluate("window.prooflane.renderMs")
        (output_dir / "render-ms.json").write_text(json.dumps({"jobs": JOBS, "render_ms": render_ms}))
        page.screenshot(path=str(output_dir / "thousand-jobs-1280.png"), full_page=True)
        page.close()
    assert errors == []
