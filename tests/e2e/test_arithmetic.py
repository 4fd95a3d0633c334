"""A real daemon names the arithmetic that proves each curve: in ``/status``, ``/metrics`` and ``/healthz``,
and one started with ``PROOFLANE_NATIVE=0`` says it runs on the libraries as a health warning (in its log
too), while staying healthy. The fleet page shows each daemon's, the one on the libraries as a warning."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser

from prooflane.cli.daemon_process import DaemonProcess
from prooflane.groth16 import arithmetics
from tests.support.daemons import running, start_daemon, wait_until
from tests.support.fleet import FleetProcess
from tests.support.tracker import metric_samples

WARNING = "bn128 and bls12381 prove on the libraries, the slower arithmetic (PROOFLANE_NATIVE=0)"


@pytest.fixture(scope="module")
def on_libraries(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PROOFLANE_NATIVE", "0")  # the daemon's process inherits it when it starts
        daemon = start_daemon(tmp_path_factory, "libraries")
    yield from running(daemon)


@pytest.fixture(scope="module")
def on_the_extension(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    here = arithmetics()
    if any(said != "c-extension" for said in here.values()):
        message = f"the C extension does not prove every curve here: {here}"
        if os.environ.get("CI"):
            pytest.fail(message)  # under CI the fast path is required
        pytest.skip(message)
    with pytest.MonkeyPatch.context() as env:
        env.delenv("PROOFLANE_NATIVE", raising=False)
        daemon = start_daemon(tmp_path_factory, "c-extension")
    yield from running(daemon)


def _arithmetic_samples(url: str) -> dict[tuple[tuple[str, str], ...], float]:
    samples = metric_samples(httpx.get(f"{url}/metrics").text)
    return {labels: v for (name, labels), v in samples.items() if name == "prooflane_arithmetic"}


def test_a_daemon_without_the_c_extension_warns_and_stays_healthy(on_libraries: DaemonProcess) -> None:
    url = on_libraries.url
    status = httpx.get(f"{url}/status").json()
    assert status["arithmetic"] == {
        "bn128": "libraries: PROOFLANE_NATIVE=0",
        "bls12381": "libraries: PROOFLANE_NATIVE=0",
    }
    assert status["health"]["ok"] is True and status["health"]["warnings"] == [WARNING]
    healthz = httpx.get(f"{url}/healthz")
    assert healthz.status_code == 200 and healthz.json()["warnings"] == [WARNING]
    assert _arithmetic_samples(url) == {
        (("arithmetic", "libraries"), ("curve", curve), ("reason", "PROOFLANE_NATIVE=0")): 1
        for curve in ("bn128", "bls12381")
    }
    assert metric_samples(httpx.get(f"{url}/metrics").text)[("prooflane_up", ())] == 1
    warned = [line for line in on_libraries.log().splitlines() if WARNING in line]
    assert len(warned) == 1 and "WARNING" in warned[0], on_libraries.log()


def test_a_daemon_with_the_c_extension_names_it(on_the_extension: DaemonProcess) -> None:
    url = on_the_extension.url
    status = httpx.get(f"{url}/status").json()
    assert status["arithmetic"] == {"bn128": "c-extension", "bls12381": "c-extension"}
    assert status["health"]["ok"] is True and status["health"]["warnings"] == []
    assert httpx.get(f"{url}/healthz").json()["warnings"] == []
    assert _arithmetic_samples(url) == {
        (("arithmetic", "c-extension"), ("curve", curve), ("reason", "")): 1
        for curve in ("bn128", "bls12381")
    }
    assert "slower arithmetic" not in on_the_extension.log()


def test_the_fleet_page_shows_each_daemons_arithmetic(
    on_libraries: DaemonProcess, on_the_extension: DaemonProcess, browser: Browser, tmp_path: Path
) -> None:
    config = tmp_path / "fleet.toml"
    config.write_text(
        f'[[daemons]]\nname = "slow"\nurl = "{on_libraries.url}"\n\n'
        f'[[daemons]]\nname = "fast"\nurl = "{on_the_extension.url}"\n'
    )
    fleet = FleetProcess(config, tmp_path / "fleet.log")
    try:
        wait_until("both up", lambda: [e["health"] for e in fleet.status()["daemons"]] == ["up", "up"])
        assert fleet.entry("slow")["summary"]["arithmetic"]["libraries"] == ["bn128", "bls12381"]
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"{fleet.url}/")
        page.wait_for_function(
            "document.querySelectorAll('[data-testid=\"d-arith\"]:not(:empty)').length === 2"
        )
        cells = {
            name: page.locator(f'tr.daemon[data-name="{name}"] [data-testid="d-arith"]')
            for name in ("slow", "fast")
        }
        assert cells["fast"].inner_text() == "arithmetic: c-extension"
        assert cells["fast"].get_attribute("data-warning") == "false"
        assert cells["slow"].inner_text() == "arithmetic: libraries (PROOFLANE_NATIVE=0)"
        assert cells["slow"].get_attribute("data-warning") == "true"
        assert cells["slow"].get_attribute("title") == WARNING
        assert cells["slow"].evaluate("el => el.scrollWidth <= el.clientWidth")  # the whole text, not cut
        page.close()
        assert errors == []
        assert f"daemon slow ({on_libraries.url}): {WARNING}" in fleet.log_path.read_text()
    finally:
        fleet.stop()


def test_the_dashboard_header_names_the_arithmetic_and_warns_of_the_libraries(
    on_libraries: DaemonProcess, on_the_extension: DaemonProcess, browser: Browser
) -> None:
    status = httpx.get(f"{on_the_extension.url}/status").json()
    products = status["products"]  # shown beside each curve's arithmetic where the C extension says them
    shown = {
        c: f"{a} · {products[c]}" if products.get(c, "libraries") != "libraries" else a
        for c, a in status["arithmetic"].items()
    }
    fast = (
        shown.popitem()[1]
        if len(set(shown.values())) == 1
        else ", ".join(f"{c} {a}" for c, a in shown.items())
    )
    assert products["bn128"] in {"avx512-ifma", "mulx", "portable"}
    for daemon, said, warning in (
        (on_libraries, "libraries: PROOFLANE_NATIVE=0", "true"),
        (on_the_extension, fast, "false"),
    ):
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{daemon.url}/")
        page.wait_for_function("document.body.dataset.seq !== ''")
        fact = page.get_by_test_id("arithmetic")
        assert fact.inner_text() == said
        assert fact.get_attribute("data-warning") == warning
        assert fact.get_attribute("title") == (WARNING if warning == "true" else "")
        page.close()
