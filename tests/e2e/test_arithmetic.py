"""A real daemon names the arithmetic that proves each curve: in ``/status``, ``/metrics`` and ``/healthz``,
and one started with ``PROOFLANE_NATIVE=0`` says it runs on the libraries as a health warning (in its log
too), while staying healthy."""

from __future__ import annotations

import os

import httpx
import pytest

from prooflane.groth16 import arithmetics
from tests.support.daemons import running, start_daemon
from tests.support.tracker import metric_samples

pytestmark = pytest.mark.slow


def _arithmetic_samples(url: str) -> dict[tuple[tuple[str, str], ...], float]:
    samples = metric_samples(httpx.get(f"{url}/metrics").text)
    return {labels: v for (name, labels), v in samples.items() if name == "prooflane_arithmetic"}


def test_a_daemon_without_the_c_extension_warns_and_stays_healthy(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROOFLANE_NATIVE", "0")  # the daemon's process inherits it
    for daemon in running(start_daemon(tmp_path_factory, "libraries")):
        status = httpx.get(f"{daemon.url}/status").json()
        assert status["arithmetic"] == {
            "bn128": "libraries: PROOFLANE_NATIVE=0",
            "bls12381": "libraries: PROOFLANE_NATIVE=0",
        }
        warning = "bn128 and bls12381 prove on the libraries, the slower arithmetic (PROOFLANE_NATIVE=0)"
        assert status["health"]["ok"] is True and status["health"]["warnings"] == [warning]
        healthz = httpx.get(f"{daemon.url}/healthz")
        assert healthz.status_code == 200 and healthz.json()["warnings"] == [warning]
        assert _arithmetic_samples(daemon.url) == {
            (("arithmetic", "libraries"), ("curve", curve), ("reason", "PROOFLANE_NATIVE=0")): 1
            for curve in ("bn128", "bls12381")
        }
        assert metric_samples(httpx.get(f"{daemon.url}/metrics").text)[("prooflane_up", ())] == 1
        warned = [line for line in daemon.log().splitlines() if warning in line]
        assert len(warned) == 1 and "WARNING" in warned[0], daemon.log()


def test_a_daemon_with_the_c_extension_names_it(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PROOFLANE_NATIVE", raising=False)
    here = arithmetics()
    if any(said != "c-extension" for said in here.values()):
        message = f"the C extension does not prove every curve here: {here}"
        if os.environ.get("CI"):
            pytest.fail(message)  # under CI the fast path is required
        pytest.skip(message)
    for daemon in running(start_daemon(tmp_path_factory, "c-extension")):
        status = httpx.get(f"{daemon.url}/status").json()
        assert status["arithmetic"] == {"bn128": "c-extension", "bls12381": "c-extension"}
        assert status["health"]["ok"] is True and status["health"]["warnings"] == []
        assert httpx.get(f"{daemon.url}/healthz").json()["warnings"] == []
        assert set(_arithmetic_samples(daemon.url)) == {
            (("arithmetic", "c-extension"), ("curve", curve), ("reason", ""))
            for curve in ("bn128", "bls12381")
        }
        assert "slower arithmetic" not in daemon.log()
