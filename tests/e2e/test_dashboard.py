"""The dashboard in a real browser (Debian's chromium driven by Playwright) against a real daemon.

One `prooflane serve --profile tiny` daemon runs for the module, on a fixed free port so that a restarted
daemon comes back at the same address. Each test gives it real work (tiny storage-proof jobs and a job on a
registered circom circuit) and reads the page while the engine proves.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from prooflane.circuits.profiles import profile_by_name
from prooflane.cli.daemon_process import DaemonProcess
from tests.support.daemons import TIMEOUT, free_port, start_daemon, wait_until
from tests.support.groth16_samples import MUL_CIRCOM

ROOT = Path(__file__).resolve().parents[2]
LONG_JOB_ID = "ps-snap-update-3644168-33825"
LONG_KIND = "sector-merkle-inclusion-poseidon-circuit"  # a circom circuit's name: 40 characters
SECTOR_BYTES = profile_by_name("tiny").sector_bytes
WORKERS = '[data-testid="worker-card"]'

# In one turn of the page's event loop: the snapshot it rendered last and what its worker cards show.
READ_CARDS = """() => {
  const cards = Array.from(document.querySelectorAll('[data-testid="worker-card"]'));
  const field = (card, id) => card.querySelector(`[data-testid="${id}"]`);
  return {
    seq: Number(document.body.dataset.seq),
    bootId: document.body.dataset.bootId,
    stale: document.body.dataset.stale === "true",
    snapshot: window.prooflane.snapshot,
    cards: cards.map((card) => ({
      worker_id: card.dataset.workerId,
      state: card.dataset.state,
      state_text: field(card, "worker-state").textContent,
      job: field(card, "worker-job").dataset.value,
      job_text: field(card, "worker-job").textContent,
      partition: field(card, "worker-partition").dataset.value,
      partition_text: field(card, "worker-partition").textContent,
    })),
  };
}"""

# Whether an element shows `text` whole: in its rendered text, not clipped, not ellipsised.
SHOWN_WHOLE = """(el, text) => {
  const style = getComputedStyle(el);
  const parent = el.parentElement;
  return {
    rendered: el.innerText.replace(/\\s+/g, ""),
    contains: el.innerText.replace(/\\s+/g, "").includes(text),
    fits: el.scrollWidth <= el.clientWidth && el.scrollHeight <= el.clientHeight + 1,
    parentFits: parent.scrollWidth <= parent.clientWidth,
    ellipsis: style.textOverflow === "ellipsis",
    visible: el.getBoundingClientRect().width > 0 && style.visibility !== "hidden",
  };
}"""


# --- the daemon ----------------------------------------------------------------------------------


class LiveDaemon(DaemonProcess):
    """The daemon the page reads (started by ``start_daemon`` on a fixed port, so it can be killed and
    started again there), and the requests the tests make of it."""

    def status(self) -> dict[str, Any]:
        """`GET /status`."""
        answer = httpx.get(f"{self.url}/status", timeout=10.0)
        answer.raise_for_status()
        snapshot: dict[str, Any] = answer.json()
        return snapshot

    def submit(self, body: dict[str, Any]) -> str:
        """`POST /v1/jobs`; the accepted job's id."""
        answer = httpx.post(f"{self.url}/v1/jobs", json=body, timeout=30.0)
        assert answer.status_code == 202, answer.text
        job_id: str = answer.json()["job_id"]
        return job_id

    def submit_storage_jobs(self, kinds: list[str], first_seed: int) -> list[str]:
        """One job per kind on a small inline sector (each its own seed)."""
        return [
            self.submit({"kind": kind, "sector": {"size": SECTOR_BYTES, "seed": f"{first_seed + n:064x}"}})
            for n, kind in enumerate(kinds)
        ]

    def live_jobs(self) -> int:
        """Jobs not yet finished."""
        return sum(p["state"] in ("queued", "running") for p in self.status()["pipelines"])


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveDaemon]:
    live = start_daemon(tmp_path_factory, "dashboard", port=free_port(), kind=LiveDaemon)
    assert isinstance(live, LiveDaemon)
    try:
        yield live
    finally:
        live.stop()


_SCRIPT_ERRORS: dict[int, list[str]] = {}


def _open(browser: Browser, url: str, width: int) -> Page:
    """The dashboard at `width` pixels, once it has rendered a fresh snapshot."""
    page = browser.new_page(viewport={"width": width, "height": 1000})
    errors = _SCRIPT_ERRORS.setdefault(id(page), [])
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{url}/")
    page.wait_for_function("document.body.dataset.stale === 'false' && document.body.dataset.seq !== ''")
    return page


def _close(page: Page) -> None:
    """Close the page; the page's own script must not have thrown at any time."""
    errors = _SCRIPT_ERRORS.pop(id(page), [])
    page.close()
    assert errors == [], errors


# --- worker cards against /status ------------------------------------------------------------------


class StatusRecorder:
    """Polls `/status` in a thread and keeps, per seq, what each worker was doing."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.by_seq: dict[int, dict[str, tuple[str, str, str]]] = {}
        self.boot_id = ""
        self._stop = threading.Event()
        self._lock = threading.Lock()  # by_seq is written by the polling thread, read by the test
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> StatusRecorder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        with httpx.Client(timeout=5.0) as http:
            while not self._stop.is_set():
                try:
                    snapshot = http.get(f"{self.url}/status").json()
                except httpx.TransportError:
                    self._stop.wait(0.1)  # not answering: the test learns that through the page
                    continue
                with self._lock:
                    self.boot_id = snapshot["boot_id"]
                    self.by_seq[snapshot["seq"]] = _workers(snapshot)
                self._stop.wait(0.01)

    def at(self, seq: int) -> dict[str, tuple[str, str, str]] | None:
        with self._lock:
            return self.by_seq.get(seq)


def _workers(snapshot: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    """worker id -> (state, job, partition) as the page shows them ("" for none)."""
    out = {}
    for w in snapshot["workers"]:
        partition = "" if w["current_partition"] is None else str(w["current_partition"])
        out[w["worker_id"]] = (w["state"], w["current_job"] or "", partition)
    return out


def _cards(read: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    return {c["worker_id"]: (c["state"], c["job"], c["partition"]) for c in read["cards"]}


def _check_card_text(read: dict[str, Any]) -> None:
    for card in read["cards"]:
        assert card["state_text"] == card["state"], card  # the state is in words, not only a colour
        assert card["job_text"] == (card["job"] or "—"), card
        assert card["partition_text"] == (card["partition"] or "—"), card


def test_worker_cards_show_what_status_shows_under_load(
    daemon: LiveDaemon, browser: Browser, output_dir: Path
) -> None:
    daemon.submit_storage_jobs(["snap-update", "porep-c2", "window-post", "winning-post"], first_seed=100)
    page = _open(browser, daemon.url, 1280)
    exact, busy_exact, samples, batches = 0, 0, 0, 1
    with StatusRecorder(daemon.url) as recorder:
        while exact < 5 or busy_exact < 2:
            read = page.evaluate(READ_CARDS)
            samples += 1
            if read["stale"]:  # a starved machine: the page says so and shows no state at all
                assert {card["state"] for card in read["cards"]} <= {"unknown"}, read["cards"]
                page.wait_for_timeout(150)
                continue
            # The cards are exactly the snapshot the page rendered, and that snapshot is the seq it shows.
            assert read["snapshot"]["seq"] == read["seq"]
            assert read["snapshot"]["boot_id"] == read["bootId"]
            assert _cards(read) == _workers(read["snapshot"])
            _check_card_text(read)
            # ...and /status served exactly that at that seq, fetched independently of the page.
            served = recorder.at(read["seq"])
            if served is not None and recorder.boot_id == read["bootId"]:
                assert _cards(read) == served, f"seq {read['seq']}"
                exact += 1
                busy_exact += any(state != "idle" for state, _, _ in served.values())
            if exact < 5 or busy_exact < 2:
                if daemon.live_jobs() == 0:
                    assert batches < 4, f"{samples} samples, {exact} matched /status, {busy_exact} busy"
                    daemon.submit_storage_jobs(["porep-c2", "snap-update"], first_seed=200 + 10 * batches)
                    batches += 1
                page.wait_for_timeout(150)
    _wait_for_finished_jobs_under_load(daemon, page, finished=2)
    page.screenshot(path=str(output_dir / "cards-under-load-1280.png"), full_page=True)
    wide = _open(browser, daemon.url, 1920)
    wide.screenshot(path=str(output_dir / "cards-under-load-1920.png"), full_page=True)
    _close(wide)
    _close(page)


def _wait_for_finished_jobs_under_load(daemon: LiveDaemon, page: Page, finished: int) -> None:
    """Until the page shows `finished` completed jobs while a worker is busy (for telling screenshots)."""
    check = """(n) => {
      const s = window.prooflane.snapshot;
      return s.counters.total_completed >= n && s.workers.some((w) => w.state !== "idle");
    }"""
    if daemon.live_jobs() < 3:
        daemon.submit_storage_jobs(["snap-update", "porep-c2", "window-post"], first_seed=500)
    page.wait_for_function(check, arg=finished, timeout=90_000, polling=100)


# --- long names ----------------------------------------------------------------------------------


def _compile_circuit(workdir: Path) -> tuple[Path, Path]:
    """A one-constraint circom circuit compiled to .r1cs and .wasm, with a development .zkey."""
    circom2 = ROOT / "node_modules" / ".bin" / "circom2"
    if not circom2.exists():
        pytest.fail("circom2 is not installed: run `make setup` (it runs `npm ci`)")
    source = workdir / "mul.circom"
    source.write_text(MUL_CIRCOM)
    subprocess.run([str(circom2), str(source), "--r1cs", "--wasm", "-o", str(workdir)], check=True,
                   capture_output=True)  # fmt: skip
    zkey = workdir / "mul.zkey"
    setup = [
        sys.executable,
        "-c",
        "from prooflane.cli import main; main()",
        "setup",
        str(workdir / "mul.r1cs"),
    ]
    subprocess.run([*setup, "--zkey", str(zkey), "--seed", "dashboard"], check=True, capture_output=True)
    return zkey, workdir / "mul_js" / "mul.wasm"


@pytest.fixture(scope="module")
def circuit(daemon: LiveDaemon, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A circom circuit registered under a 40-character name; jobs give inputs `a` and `b`."""
    assert len(LONG_KIND) == 40
    zkey, wasm = _compile_circuit(tmp_path_factory.mktemp("circuit"))
    registered = httpx.post(
        f"{daemon.url}/v1/circuits",
        json={"name": LONG_KIND, "zkey": str(zkey), "wasm": str(wasm)},
        timeout=60,
    )
    assert registered.status_code in (200, 201), registered.text
    return LONG_KIND


def test_long_kind_and_job_id_are_shown_whole(
    daemon: LiveDaemon, circuit: str, browser: Browser, output_dir: Path
) -> None:
    circom_job = daemon.submit(
        {"kind": "circom", "circuit": circuit, "witnesses": [{"a": 3, "b": 11}, {"a": 5, "b": 7}]}
    )
    long_job = {
        "kind": "snap-update",
        "job_id": LONG_JOB_ID,
        "sector": {"size": SECTOR_BYTES, "seed": "7" * 64},
    }
    assert daemon.submit(long_job) == LONG_JOB_ID
    for width in (1280, 1920):
        page = _open(browser, daemon.url, width)
        for job_id, text in ((circom_job, LONG_KIND), (LONG_JOB_ID, LONG_JOB_ID)):
            row = page.locator(f'[data-testid="pipeline-row"][data-job-id="{job_id}"]')
            row.wait_for()
            target = row.locator(
                '[data-testid="job-kind"]' if text == LONG_KIND else '[data-testid="job-id"]'
            )
            expect(target).to_contain_text(text)  # a circom job's circuit name comes from its job view
            shown = target.evaluate(SHOWN_WHOLE, text)
            assert shown["contains"], shown
            assert shown["fits"] and shown["parentFits"], shown
            assert not shown["ellipsis"], shown
            assert shown["visible"], shown
        page.screenshot(path=str(output_dir / f"long-names-{width}.png"), full_page=True)
        _close(page)


def test_failed_job_shows_its_reason_in_text(
    daemon: LiveDaemon, circuit: str, browser: Browser, output_dir: Path
) -> None:
    # Input `b` is missing from partition 0: its witness cannot be computed, so the job fails there.
    # Critical priority: it goes ahead of the work earlier tests left queued.
    witnesses = [{"a": 3}, {"a": 5, "b": 7}]
    job_id = daemon.submit(
        {"kind": "circom", "circuit": circuit, "witnesses": witnesses, "priority": "critical"}
    )
    page = _open(browser, daemon.url, 1280)
    row = page.locator(f'[data-testid="pipeline-row"][data-job-id="{job_id}"]')
    page.wait_for_function(
        "(id) => window.prooflane.snapshot.recent_jobs.some((j) => j.job_id === id)", arg=job_id
    )
    snapshot = page.evaluate("window.prooflane.snapshot")
    (finished,) = [j for j in snapshot["recent_jobs"] if j["job_id"] == job_id]
    assert finished["outcome"] == "failed" and finished["reason"]
    (live,) = [p for p in snapshot["pipelines"] if p["job_id"] == job_id]
    (failed,) = [p for p in live["partitions"] if p["state"] == "failed"]
    assert failed["index"] == 0

    cell = row.locator('[data-testid="partition-cell"][data-index="0"]')
    assert cell.get_attribute("data-state") == "failed"
    assert "failed" in (cell.text_content() or "")  # the state in words, not only red
    assert _plain(failed["reason"]) in _plain(cell.get_attribute("title") or "")  # the whole reason on hover
    failures = row.locator('[data-testid="job-failure"]').all_text_contents()
    assert any(f"partition 0: {_first_line(failed['reason'])}" == text for text in failures), failures

    history = page.locator(f'[data-testid="history-row"][data-key="{job_id}"]')
    cells = history.locator("td").all_text_contents()
    assert cells[0] == job_id
    assert cells[1] == f"circom · {circuit}"
    assert cells[3] == "failed"
    assert cells[4] == _first_line(finished["reason"])
    page.screenshot(path=str(output_dir / "failed-job.png"), full_page=True)
    _close(page)


STREAM = 45  # jobs that finish after the failure: more than the 25 rows of Recently finished

# In one turn of the page's event loop: the failure the snapshot it rendered keeps, and its row on the page.
READ_FAILURE = """(id) => {
  const s = window.prooflane.snapshot;
  const row = document.querySelector(`[data-testid="failure-row"][data-job-id="${id}"]`);
  const cell = (name) => row && row.querySelector(`[data-testid="failure-${name}"]`);
  return {
    kept: (s.recent_failures || []).find((j) => j.job_id === id) || null,
    newest: s.recent_jobs.slice(0, 25).map((j) => j.job_id),
    history: Array.from(document.querySelectorAll('[data-testid="history-row"]')).map((r) => r.dataset.key),
    row: row && {
      job: cell("job").textContent, kind: cell("kind").textContent, partition: cell("partition").textContent,
      reason: cell("reason").textContent, title: cell("reason").title, time: cell("time").textContent,
      visible: row.getBoundingClientRect().height > 0,
    },
  };
}"""


def test_a_failure_stays_in_sight_under_a_stream_of_jobs(
    daemon: LiveDaemon, circuit: str, browser: Browser, output_dir: Path
) -> None:
    # Input `b` is missing: the circuit's witness generator (node, through snarkjs) fails, in colour, with a
    # stack trace. Critical priority: it goes ahead of the work earlier tests left queued.
    failed = daemon.submit(
        {"kind": "circom", "circuit": circuit, "witnesses": [{"a": 3}], "priority": "critical"}
    )
    wait_until(
        "the circom job to fail", lambda: failed in [j["job_id"] for j in daemon.status()["recent_failures"]]
    )
    stream = daemon.submit_storage_jobs(["winning-post"] * STREAM, first_seed=700)
    wait_until("the stream to finish", lambda: not set(stream) & {
        p["job_id"] for p in daemon.status()["pipelines"] if p["state"] in ("queued", "running")
    })  # fmt: skip
    for width in (1280, 1920):
        page = _open(browser, daemon.url, width)
        page.wait_for_function(
            '(id) => document.querySelector(`[data-testid="failure-row"][data-job-id="${id}"]`)',
            arg=failed,
        )
        read = page.evaluate(READ_FAILURE, failed)
        assert failed not in read["newest"] and failed not in read["history"]  # pushed out of the history
        kept, row = read["kept"], read["row"]
        assert kept is not None and row is not None and row["visible"], read
        assert (row["job"], row["kind"], row["partition"]) == (failed, f"circom · {circuit}", "#0")
        # The reason is the witness generator's message, cleaned: no colour codes, no stack frames.
        assert row["reason"] == _first_line(kept["reason"]) and "input" in row["reason"], row
        for text in (row["reason"], row["title"], kept["reason"]):
            assert "\x1b" not in text and "    at " not in text and ".cjs:" not in text, text
        assert re.fullmatch(r"\d\d:\d\d:\d\d \(.+ ago\)", row["time"]), row["time"]
        # The failed total leads to it.
        total = page.get_by_test_id("total-failed")
        assert int(total.text_content() or "0") >= 1
        page.evaluate("window.scrollTo(0, 0)")
        total.click()
        box, viewport = page.locator("#failures").bounding_box(), page.viewport_size
        assert box is not None and viewport is not None
        assert -1 < box["y"] < viewport["height"], (
            box
        )  # scrolled into view (to the pixel: layout is fractional)
        page.screenshot(path=str(output_dir / f"failures-{width}.png"))
        # The screenshots of docs/dashboard.md and the README: busy workers, and the failure in its list.
        page.evaluate("document.activeElement.blur(); window.scrollTo(0, 0)")
        _wait_for_busy_workers(daemon, page, first_seed=800 + width)
        page.screenshot(path=str(output_dir / f"dashboard-{width}.png"), full_page=True)
        _close(page)


def _wait_for_busy_workers(daemon: LiveDaemon, page: Page, first_seed: int) -> None:
    """Until the page shows a worker proving or finalizing, with work queued behind it."""
    daemon.submit_storage_jobs(["snap-update", "porep-c2", "window-post"], first_seed=first_seed)
    check = "() => window.prooflane.snapshot.workers.some((w) => w.state !== 'idle')"
    page.wait_for_function(check, timeout=90_000, polling=100)


def _plain(text: str) -> str:
    """Text without terminal colour codes and with single spaces, as the page shows it."""
    return " ".join(re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text).split())


def _first_line(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text).strip().split("\n", 1)[0].strip()


def test_page_keeps_up_by_polling_when_the_event_stream_is_blocked(
    daemon: LiveDaemon, browser: Browser
) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.route("**/v1/events*", lambda route: route.abort())  # a proxy that refuses event streams
    errors = _SCRIPT_ERRORS.setdefault(id(page), [])
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{daemon.url}/")
    page.wait_for_function("document.body.dataset.stale === 'false' && document.body.dataset.seq !== ''")
    first = int(page.evaluate("document.body.dataset.seq"))
    daemon.submit_storage_jobs(["window-post", "winning-post"], first_seed=400)
    page.wait_for_function(f"Number(document.body.dataset.seq) > {first}")
    assert page.evaluate("document.body.dataset.connection") == "polling"
    assert page.evaluate("document.body.dataset.stale") == "false"
    read = page.evaluate(READ_CARDS)
    assert _cards(read) == _workers(read["snapshot"])
    _close(page)


# --- a daemon that goes away and comes back ------------------------------------------------------


def test_killed_daemon_shows_stale_banner_and_restart_is_picked_up(
    daemon: LiveDaemon, browser: Browser, output_dir: Path
) -> None:
    daemon.submit_storage_jobs(["porep-c2", "snap-update"], first_seed=300)
    page = _open(browser, daemon.url, 1280)
    first_boot = daemon.status()["boot_id"]
    page.wait_for_function(f"document.body.dataset.bootId === {first_boot!r}")
    banner = page.locator('[data-testid="stale-banner"]')
    assert not banner.is_visible()

    daemon.kill()
    banner.wait_for(state="visible", timeout=5000)  # the requirement: stale within 5 s
    assert "old" in (banner.text_content() or "")
    states = page.eval_on_selector_all(WORKERS, "cards => cards.map((c) => c.dataset.state)")
    assert states and set(states) == {"unknown"}, states  # never "idle" for what it cannot know
    texts = page.eval_on_selector_all(
        WORKERS, "cards => cards.map((c) => c.querySelector('[data-testid=\"worker-state\"]').textContent)"
    )
    assert all("idle" not in t for t in texts), texts
    page.screenshot(path=str(output_dir / "stale.png"), full_page=True)

    daemon.start(timeout=TIMEOUT)
    second_boot = daemon.status()["boot_id"]
    assert second_boot != first_boot
    page.wait_for_function(
        f"document.body.dataset.bootId === {second_boot!r} && document.body.dataset.stale === 'false'"
    )
    assert not banner.is_visible()
    read = page.evaluate(READ_CARDS)
    assert read["snapshot"]["boot_id"] == second_boot
    assert _cards(read) == _workers(read["snapshot"])
    assert all(card["state"] != "unknown" for card in read["cards"])
    page.screenshot(path=str(output_dir / "restarted.png"), full_page=True)
    _close(page)


# --- order and height ----------------------------------------------------------------------------

FINISHED_COPIES = 100


def _reshaped(snapshot: dict[str, Any], finished: dict[str, Any]) -> dict[str, Any]:
    """The daemon's own snapshot with its devices renamed cpu:10 and cpu:2 and listed (with their workers)
    in the order a daemon sees them first, not in id order, and 100 finished jobs in the live view (the last
    20 listed, as ``/status`` lists them, all counted)."""
    names = {"cpu:0": "cpu:10", "cpu:1": "cpu:2"}
    devices = [d | {"device": names.get(d["device"], d["device"])} for d in snapshot["devices"]]
    workers = []
    for w in snapshot["workers"]:
        device = names.get(w["device"], w["device"])
        workers.append(w | {"device": device, "worker_id": device + w["worker_id"].removeprefix(w["device"])})
    live = [j for j in snapshot["pipelines"] if j["state"] not in ("done", "failed", "cancelled")][:2]
    done = [
        finished | {"job_id": f"finished-{n:03d}", "started_secs_ago": 500.0 - n}
        for n in range(FINISHED_COPIES - 20, FINISHED_COPIES)
    ]
    counts = {state: sum(j["state"] == state for j in live) for state in ("queued", "running")}
    counts |= {"done": FINISHED_COPIES, "failed": 0, "cancelled": 0}
    total = sum(counts.values())
    live_jobs = snapshot["live_jobs"] | counts | {"total": total, "shown": len(live) + len(done)}
    return snapshot | {"devices": devices[::-1], "workers": workers[::-1], "pipelines": live + done,
                       "live_jobs": live_jobs}  # fmt: skip


def test_cards_in_id_order_and_finished_tail_keeps_the_live_view_on_one_screen(
    daemon: LiveDaemon, browser: Browser, output_dir: Path
) -> None:
    daemon.submit_storage_jobs(["winning-post"], first_seed=600)

    def finished_job() -> dict[str, Any] | None:
        return next((j for j in daemon.status()["pipelines"] if j["state"] == "done"), None)

    deadline = time.monotonic() + TIMEOUT
    while (job := finished_job()) is None:
        assert time.monotonic() < deadline, "no job finished"
        time.sleep(0.2)
    shaped = _reshaped(daemon.status(), job)
    assert len(shaped["devices"]) >= 2, "the test needs two devices (two cores)"
    body = json.dumps(shaped)
    page = browser.new_page(viewport={"width": 1920, "height": 1080})
    page.route(
        "**/status", lambda route: route.fulfill(status=200, content_type="application/json", body=body)
    )
    page.route("**/v1/events*", lambda route: route.abort())
    page.goto(f"{daemon.url}/")
    page.wait_for_function("document.body.dataset.stale === 'false' && document.body.dataset.seq !== ''")

    devices = page.eval_on_selector_all('[data-testid="device"]', "els => els.map((e) => e.dataset.key)")
    assert devices[:2] == ["cpu:2", "cpu:10"], devices  # 2 before 10, whatever order they came in
    cards = page.eval_on_selector_all(WORKERS, "els => els.map((e) => e.dataset.workerId)")
    per_device = len(cards) // len(shaped["devices"])
    assert cards == [f"cpu:{d}/w{w}" for d in (2, 10) for w in range(per_device)], cards

    rows = page.locator('[data-testid="pipelines-finished"] [data-testid="pipeline-row"]')
    assert rows.count() == 4  # the newest four of the hundred
    assert rows.evaluate_all("els => els.map((e) => e.dataset.jobId)") == [
        f"finished-{n:03d}" for n in range(FINISHED_COPIES - 4, FINISHED_COPIES)
    ]
    title = page.locator('[data-testid="finished-title"]').text_content() or ""
    assert f"the newest 4 of {FINISHED_COPIES}" in title
    # Memory, workers and pipelines, finished tail included, fit the first screen at 1920x1080.
    bottom = page.evaluate(
        "document.querySelector('#h-pipelines').closest('section').getBoundingClientRect().bottom + scrollY"
    )
    page.screenshot(path=str(output_dir / "dashboard-1920-finished-tail.png"), full_page=True)
    assert bottom <= 1080, bottom
    page.locator('[data-testid="finished-title"]').click()  # collapsible
    assert not rows.first.is_visible()
    page.close()
