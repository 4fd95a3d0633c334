"""The dashboard shows every string it is given as text: markup in a job's failure reason, or in any string
field of a snapshot, is displayed literally and never runs (Debian's chromium driven by Playwright, against a
real `prooflane serve --profile tiny`).

Job ids and circuit names cannot carry markup (the API refuses them); what reaches the page from outside is
free text such as a failure reason, which names the files of the request. The first test makes a job fail
on witness files whose names are markup; the second hands the page a snapshot whose every string carries
markup.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Dialog, Page

from prooflane.cli.daemon_process import DaemonProcess
from tests.support.daemons import TIMEOUT, circom_files, running, start_daemon

IMG = "<img src=x onerror=window.__pwned=1>"
SVG = "<svg onload=window.__pwned=2>"
SCRIPT = "<script>window.__pwned=3</script>"

# Whether anything the markup would have made exists or ran.
RAN = """() => ({
  pwned: window.__pwned === undefined ? null : window.__pwned,
  handlers: document.querySelectorAll("[onerror], [onload]").length,
  images: document.querySelectorAll('img[src="x"]').length,
  scripts: Array.from(document.scripts).filter((s) => s.textContent.includes("__pwned")).length,
})"""


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    yield from running(start_daemon(tmp_path_factory, "escaping"))


def watch(page: Page) -> list[str]:
    """A list that collects the page's script errors and dialogs (an ``alert`` that ran, say)."""
    trouble: list[str] = []

    def on_dialog(dialog: Dialog) -> None:
        trouble.append(f"dialog: {dialog.message}")
        dialog.dismiss()

    page.on("pageerror", lambda exc: trouble.append(f"script error: {exc}"))
    page.on("dialog", on_dialog)
    return trouble


def open_page(browser: Browser, url: str) -> tuple[Page, list[str]]:
    """The dashboard once it shows a fresh snapshot, and what :func:`watch` collects."""
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    trouble = watch(page)
    page.goto(f"{url}/")
    page.wait_for_function("document.body.dataset.stale === 'false' && document.body.dataset.seq !== ''")
    return page, trouble


def assert_nothing_ran(page: Page, trouble: list[str]) -> None:
    page.wait_for_timeout(300)  # an image that failed to load would have fired onerror by now
    assert page.evaluate(RAN) == {"pwned": None, "handlers": 0, "images": 0, "scripts": 0}
    assert trouble == []


def test_markup_in_ids_and_names_is_refused_by_the_api(daemon: DaemonProcess) -> None:
    job = httpx.post(
        f"{daemon.url}/v1/jobs",
        json={"kind": "winning-post", "sector": {"size": 256}, "job_id": IMG},
        timeout=TIMEOUT,
    )
    assert job.status_code == 422 and "job_id" in job.json()["detail"]
    circuit = httpx.post(
        f"{daemon.url}/v1/circuits", json={"name": SCRIPT, "zkey": "/x.zkey"}, timeout=TIMEOUT
    )
    assert circuit.status_code == 422 and "name" in circuit.json()["detail"]


def test_a_failure_reason_naming_files_of_markup_is_shown_as_text(
    daemon: DaemonProcess, browser: Browser, tmp_path_factory: pytest.TempPathFactory, output_dir: Path
) -> None:
    files = circom_files(tmp_path_factory.mktemp("escaping-circuit"))
    registered = httpx.post(
        f"{daemon.url}/v1/circuits", json={"name": "wp", "zkey": str(files["zkey"])}, timeout=TIMEOUT
    )
    assert registered.status_code == 201, registered.text
    folder = tmp_path_factory.mktemp("markup")
    witnesses = [folder / f"{IMG}.wtns", folder / f"{SVG}.wtns"]
    for path in witnesses:
        path.write_bytes(b"not a witness file")  # synthesis fails on it, naming the file
    body = {
        "kind": "circom",
        "circuit": "wp",
        "witnesses": [str(p) for p in witnesses],
        "priority": "critical",
    }
    submitted = httpx.post(f"{daemon.url}/v1/jobs", json=body, timeout=TIMEOUT)
    assert submitted.status_code == 202, submitted.text
    job_id = submitted.json()["job_id"]

    page, trouble = open_page(browser, daemon.url)
    page.wait_for_function(
        "(id) => (window.prooflane.snapshot.recent_jobs || []).some((j) => j.job_id === id)",
        arg=job_id,
        timeout=TIMEOUT * 1000,
    )
    row = page.locator(f'[data-testid="pipeline-row"][data-job-id="{job_id}"]')
    failures = " ".join(row.locator('[data-testid="job-failure"]').all_text_contents())
    assert IMG in failures or SVG in failures, failures
    history = (
        page.locator(f'[data-testid="history-row"][data-key="{job_id}"]').locator("td").all_text_contents()
    )
    assert IMG in history[4] or SVG in history[4], history
    page.screenshot(path=str(output_dir / "markup-reason.png"), full_page=True)
    assert_nothing_ran(page, trouble)
    page.close()


# Keys whose values the page reads as states or times, not as text to show.
NOT_TEXT = {"state", "priority", "outcome", "taken_at", "version", "kind"}


def _marked(value: Any, key: str = "") -> Any:
    """``value`` with markup added to every string the page may show (the same string, the same markup)."""
    if isinstance(value, dict):
        return {k: _marked(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_marked(v, key) for v in value]
    if isinstance(value, str) and key not in NOT_TEXT:
        return f"{value}{IMG}{SVG}{SCRIPT}"
    return value


def test_every_string_of_a_snapshot_is_shown_as_text(
    daemon: DaemonProcess, browser: Browser, output_dir: Path
) -> None:
    for n in range(2):
        body = {"kind": "winning-post", "sector": {"size": 256, "seed": f"{n + 40:064x}"}}
        assert httpx.post(f"{daemon.url}/v1/jobs", json=body, timeout=TIMEOUT).status_code == 202
    snapshot = httpx.get(f"{daemon.url}/status", timeout=TIMEOUT).json()
    assert snapshot["workers"] and snapshot["pipelines"], "the page must have workers and jobs to show"
    marked = _marked(snapshot)
    page = browser.new_page(viewport={"width": 1920, "height": 1080})
    trouble = watch(page)
    page.route(
        "**/status",
        lambda route: route.fulfill(status=200, content_type="application/json", body=json.dumps(marked)),
    )
    page.route("**/v1/events*", lambda route: route.abort())
    page.goto(f"{daemon.url}/")
    page.wait_for_function("document.body.dataset.seq !== ''")
    shown = page.evaluate("document.body.innerText")
    job = marked["pipelines"][0]["job_id"]
    worker = marked["workers"][0]["worker_id"]
    for text in (job, worker):
        assert text in shown, (text, shown[:2000])
    page.screenshot(path=str(output_dir / "markup-snapshot.png"), full_page=True)
    assert_nothing_ran(page, trouble)
    page.close()
