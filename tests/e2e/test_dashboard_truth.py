"""Every figure on the dashboard means what it says, in a real browser (Debian's chromium driven by
Playwright) against a real `prooflane serve --profile tiny` with a 40 MiB memory budget, proving real jobs.

- the memory headline counts everything the budget holds (reservations and cached keys), read from the page
  and from the snapshot it rendered in one turn of its event loop, and the RSS it names is the daemon's and
  its workers'; the cached keys' names are whole at 1280 pixels, in whole rows;
- the panels keep their place and size between polls while jobs come and go;
- a worker whose prover was killed shows its restart on its card once it is back (and /metrics counts it);
- after the daemon is killed, every panel with a live figure is dimmed and says "as of HH:MM:SS".

The failures list under a stream of jobs is in ``test_dashboard.py`` (it needs that module's circom circuit).
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from playwright.sync_api import Browser, Page
from prometheus_client.parser import text_string_to_metric_families

from prooflane.circuits.profiles import profile_by_name
from prooflane.cli.daemon_process import DaemonProcess
from prooflane.devices.roles import Role
from tests.support.daemons import TIMEOUT, free_port, start_daemon, wait_until

SECTOR_BYTES = profile_by_name("tiny").sector_bytes
BUDGET = 40 << 20  # small enough that the cached proving keys hold much of it
WIDTHS = (1280, 1920)

# In one turn of the page's event loop: the snapshot it rendered and what its memory panel shows.
READ_MEMORY = """() => {
  const field = (id) => document.querySelector(`[data-testid="${id}"]`);
  const gauge = field("memory-gauge");
  return {
    memory: window.prooflane.snapshot.memory,
    fraction: Number(gauge.dataset.fraction),
    level: gauge.dataset.level,
    headline: field("memory-text").textContent,
    tree: field("memory-rss-tree").textContent,
    treeLabel: field("memory-rss-tree").previousElementSibling.textContent,
  };
}"""

# Each cached key's name as shown: whole (not clipped), on one line, and the box's rows against its height.
READ_KEYS = """() => {
  const box = document.querySelector(".keys-box");
  const rows = Array.from(box.querySelectorAll('[data-testid="allocation"]'));
  return {
    box: box.clientHeight,
    rows: rows.map((row) => {
      const name = row.querySelector('[data-testid="allocation-name"]');
      return { text: name.textContent, title: name.title, row: row.getBoundingClientRect().height,
               lineHeight: parseFloat(getComputedStyle(name).lineHeight), height: name.clientHeight,
               fits: name.scrollWidth <= name.clientWidth };
    }),
  };
}"""

# Each key's tables as shown, and the snapshot the page rendered them from, in one turn of its event loop.
READ_TABLES = """() => ({
  tables: window.prooflane.snapshot.tables,
  rows: Array.from(document.querySelectorAll('[data-testid="table"]')).map((row) => {
    const key = row.querySelector('[data-testid="table-key"]');
    const said = row.querySelector('[data-testid="table-state"]');
    return { key: key.textContent, title: key.title, state: row.dataset.state, text: said.textContent,
             keyFits: key.scrollWidth <= key.clientWidth, textWide: said.scrollWidth <= said.clientWidth,
             textFits: said.scrollHeight <= said.clientHeight + 1 };
  }),
})"""

# Every panel's place and size on the page.
PANELS = """() => Array.from(document.querySelectorAll("main > section")).map((s) => {
  const r = s.getBoundingClientRect();
  return { id: s.querySelector("h2").id, top: r.top + scrollY, height: r.height };
})"""

# Every panel with a live figure: its "as of" mark, and whether what is under its heading is dimmed.
READ_MARKS = """() => Array.from(document.querySelectorAll("main > section")).map((s) => {
  const mark = s.querySelector('[data-testid="as-of"]');
  const body = Array.from(s.children).filter((c) => c.tagName !== "H2" && c.offsetParent !== null);
  return {
    id: s.querySelector("h2").id,
    live: s.hasAttribute("data-live"),
    mark: mark && !mark.hidden ? mark.textContent : null,
    dimmed: body.length > 0 && body.every((c) => {
      const style = getComputedStyle(c);
      return Number(style.opacity) < 1 && style.filter.includes("grayscale");
    }),
  };
})"""


class Daemon(DaemonProcess):
    """The daemon the page reads, on a fixed port (so it can be killed and started again there)."""

    def status(self) -> dict[str, Any]:
        answer = httpx.get(f"{self.url}/status", timeout=10.0)
        answer.raise_for_status()
        snapshot: dict[str, Any] = answer.json()
        return snapshot

    def submit(self, kinds: list[str], first_seed: int) -> None:
        for n, kind in enumerate(kinds):
            body = {"kind": kind, "sector": {"size": SECTOR_BYTES, "seed": f"{first_seed + n:064x}"}}
            answer = httpx.post(f"{self.url}/v1/jobs", json=body, timeout=30.0)
            assert answer.status_code == 202, answer.text

    def live_jobs(self) -> int:
        return sum(p["state"] in ("queued", "running") for p in self.status()["pipelines"])


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    config = f"memory_budget_bytes = {BUDGET}\n"
    live = start_daemon(tmp_path_factory, "truth", port=free_port(), extra_config=config, kind=Daemon)
    assert isinstance(live, Daemon)
    try:
        yield live
    finally:
        live.stop()


def _open(browser: Browser, url: str, width: int, errors: list[str]) -> Page:
    page = browser.new_page(viewport={"width": width, "height": 1000})
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{url}/")
    page.wait_for_function("document.body.dataset.stale === 'false' && document.body.dataset.seq !== ''")
    return page


def _keys_cached(page: Page) -> None:
    page.wait_for_function(
        "window.prooflane.snapshot.memory.cached_bytes > 0 && "
        "document.querySelectorAll('[data-testid=\"allocation\"]').length > 0",
        timeout=TIMEOUT * 1000,
    )


# --- memory ------------------------------------------------------------------------------------


def test_the_memory_headline_counts_everything_the_budget_holds(
    daemon: Daemon, browser: Browser, output_dir: Path
) -> None:
    daemon.submit(["porep-c2", "snap-update", "window-post", "winning-post"], first_seed=10)
    errors: list[str] = []
    for width in WIDTHS:
        page = _open(browser, daemon.url, width, errors)
        _keys_cached(page)
        read = page.evaluate(READ_MEMORY)
        m = read["memory"]
        held = m["reserved_bytes"] + m["cached_bytes"]
        assert m["used_bytes"] == held > 0
        assert m["total_bytes"] == BUDGET
        # The gauge and its percentage count what the budget holds, not the reservations alone.
        assert read["fraction"] == pytest.approx(held / BUDGET, abs=1e-4)
        shown = re.search(r"\((\d+)%", read["headline"])
        assert shown is not None, read["headline"]
        assert int(shown.group(1)) == round(100 * held / BUDGET) >= int(100 * m["cached_bytes"] / BUDGET)
        fraction = held / BUDGET
        assert read["level"] == ("green" if fraction < 0.6 else "amber" if fraction < 0.85 else "red")
        # The RSS the page names is the daemon's and its workers'.
        assert read["treeLabel"] == "RSS, daemon and workers"
        assert m["tree_rss_bytes"] > m["process_rss_bytes"] > 0
        assert read["tree"] not in ("", "–")
        page.screenshot(path=str(output_dir / f"memory-{width}.png"), full_page=True)
        page.close()
    assert errors == []


def test_cached_key_names_are_whole_in_whole_rows_at_1280(
    daemon: Daemon, browser: Browser, output_dir: Path
) -> None:
    daemon.submit(["porep-c2", "window-post"], first_seed=70)  # keys to show, whichever test ran first
    errors: list[str] = []
    page = _open(browser, daemon.url, 1280, errors)
    _keys_cached(page)
    keys = page.evaluate(READ_KEYS)
    names = {a["name"] for a in page.evaluate("window.prooflane.snapshot.allocations")}
    assert keys["rows"]
    for row in keys["rows"]:
        assert row["text"] in names and row["title"] == row["text"], row
        assert row["fits"], row  # not clipped: no ellipsis needed
        assert row["height"] <= row["lineHeight"] + 1, row  # one line: never broken at a hyphen
    row_height = keys["rows"][0]["row"]
    assert keys["box"] == pytest.approx(4 * row_height, abs=1)  # four whole entries, then a scroll bar
    page.locator(".keys-box").screenshot(path=str(output_dir / "cached-keys-1280.png"))
    page.close()
    assert errors == []


def test_each_key_s_tables_are_shown_whole_as_the_snapshot_says(
    daemon: Daemon, browser: Browser, output_dir: Path
) -> None:
    """With a 40 MiB budget no key's tables fit a quarter of it: every key proven is listed in the cached
    keys' box, under the keys, "msm tables: not used" with the whole reason ``/status`` gives, its name and
    the reason never cut."""
    daemon.submit(["window-post", "winning-post"], first_seed=50)
    errors: list[str] = []
    page = _open(browser, daemon.url, 1280, errors)
    page.wait_for_function(
        "window.prooflane.snapshot.tables.length >= 2 && "
        "document.querySelectorAll('[data-testid=\"table\"]').length >= 2",
        timeout=TIMEOUT * 1000,
    )
    read = page.evaluate(READ_TABLES)
    assert [r["key"] for r in read["rows"]] == [t["key"] for t in read["tables"]]
    for row, table in zip(read["rows"], read["tables"], strict=True):
        assert table["state"] == row["state"] == "unused", table
        assert "quarter of the memory budget" in table["reason"], table
        assert row["text"] == f"msm tables: not used, {table['reason']}", row
        assert row["title"] == row["key"] and row["keyFits"], row
        assert row["textFits"] and row["textWide"], row  # wrapped onto lines of its own, never clipped
    page.locator('[data-testid="tables"]').scroll_into_view_if_needed()
    page.locator(".keys-box").screenshot(path=str(output_dir / "msm-tables-1280.png"))
    page.close()
    assert errors == []


# --- layout ------------------------------------------------------------------------------------


def test_the_panels_keep_their_place_and_size_between_polls(
    daemon: Daemon, browser: Browser, output_dir: Path
) -> None:
    daemon.submit(["porep-c2", "snap-update", "winning-post", "window-post"] * 3, first_seed=100)
    errors: list[str] = []
    pages = {width: _open(browser, daemon.url, width, errors) for width in WIDTHS}
    for page in pages.values():
        _keys_cached(page)
    seen: dict[int, list[list[dict[str, Any]]]] = {width: [] for width in WIDTHS}
    seqs: dict[int, set[int]] = {width: set() for width in WIDTHS}
    while min(len(s) for s in seqs.values()) < 8:
        for width, page in pages.items():
            seq = int(page.evaluate("document.body.dataset.seq"))
            if seq not in seqs[width]:  # a new snapshot rendered: measure it
                seqs[width].add(seq)
                seen[width].append(page.evaluate(PANELS))
        if daemon.live_jobs() == 0:
            daemon.submit(
                ["porep-c2", "snap-update", "winning-post"], first_seed=200 + sum(map(len, seqs.values()))
            )
        pages[WIDTHS[0]].wait_for_timeout(400)
    for width, samples in seen.items():
        first = samples[0]
        for sample in samples[1:]:
            assert sample == first, f"at {width} px a panel moved or changed size between polls"
        pages[width].screenshot(path=str(output_dir / f"steady-{width}.png"), full_page=True)
        pages[width].close()
    assert errors == []


# --- a worker killed and restarted -------------------------------------------------------------


def _provers(daemon: Daemon) -> list[psutil.Process]:
    return [p for p in psutil.Process(daemon.pid).children(recursive=True) if p.name() == Role.PROVER.value]


def _restarts_metric(url: str) -> dict[tuple[str, str], float]:
    text = httpx.get(f"{url}/metrics", timeout=10.0).text
    return {
        (sample.labels["worker"], sample.labels["device"]): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "prooflane_worker_restarts_total"
    }


def test_a_killed_worker_shows_its_restart_on_its_card_once_it_is_back(
    daemon: Daemon, browser: Browser, output_dir: Path
) -> None:
    errors: list[str] = []
    page = _open(browser, daemon.url, 1280, errors)
    before = {w["worker_id"]: w["restarts"] for w in daemon.status()["workers"]}
    provers = _provers(daemon)
    assert provers, "the daemon runs its workers' provers as child processes"
    provers[0].send_signal(signal.SIGKILL)

    def restarted_and_back() -> bool:
        workers = daemon.status()["workers"]
        return any(w["restarts"] > before.get(w["worker_id"], 0) and w["state"] not in ("restarting", "lost")
                   for w in workers)  # fmt: skip

    wait_until("the killed worker to be replaced", restarted_and_back)
    (worker,) = [w for w in daemon.status()["workers"] if w["restarts"] > before.get(w["worker_id"], 0)]
    assert worker["last_error"] and worker["last_restart_secs_ago"] is not None
    card = page.locator(f'[data-testid="worker-card"][data-worker-id="{worker["worker_id"]}"]')
    page.wait_for_function(
        """(id) => {
          const w = window.prooflane.snapshot.workers.find((x) => x.worker_id === id);
          return w && w.restarts > 0 && !["restarting", "lost"].includes(w.state);
        }""",
        arg=worker["worker_id"],
    )
    state = card.get_attribute("data-state")
    assert state not in ("restarting", "lost", "unknown"), state
    line = card.get_by_test_id("worker-restarts").text_content() or ""
    shown = page.evaluate(
        "(id) => window.prooflane.snapshot.workers.find((x) => x.worker_id === id)", worker["worker_id"]
    )
    assert re.fullmatch(rf"restarted {shown['restarts']}× · last \d\d:\d\d:\d\d: .+", line), line
    assert line.endswith(f": {shown['last_error']}"), line
    counted = _restarts_metric(daemon.url)
    assert counted[(worker["worker_id"], worker["device"])] >= 1
    assert all(n == 0 for (w, _), n in counted.items() if before.get(w) == 0 and w != worker["worker_id"])
    card.screenshot(path=str(output_dir / "restarted-card.png"))
    page.close()
    assert errors == []


# --- a daemon that stops answering -------------------------------------------------------------


def test_after_the_daemon_stops_every_live_panel_says_as_of_when(
    daemon: Daemon, browser: Browser, output_dir: Path
) -> None:
    daemon.submit(["porep-c2", "snap-update"], first_seed=300)
    errors: list[str] = []
    page = _open(browser, daemon.url, 1920, errors)
    page.wait_for_function("window.prooflane.snapshot.devices.length > 0")
    marks = page.evaluate(READ_MARKS)
    assert all(m["live"] for m in marks), marks  # every panel shows live figures
    assert all(m["mark"] is None and not m["dimmed"] for m in marks), marks  # none marked while fresh
    daemon.kill()
    try:
        page.locator('[data-testid="stale-banner"]').wait_for(state="visible")
        marks = page.evaluate(READ_MARKS)
        for m in marks:
            assert m["mark"] is not None and re.fullmatch(r"as of \d\d:\d\d:\d\d \(stale\)", m["mark"]), m
            assert m["dimmed"], m  # no live look: dimmed and grey, bars and charts included
        busy = page.get_by_test_id("device").first
        assert "busy (1 min)" in (busy.text_content() or "")  # the last figure, kept, but marked as old
        page.screenshot(path=str(output_dir / "stale-1920.png"), full_page=True)
    finally:
        page.close()
        daemon.start(timeout=TIMEOUT)  # for whatever runs after this test
    assert errors == []
