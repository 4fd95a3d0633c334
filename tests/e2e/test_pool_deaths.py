"""A pool process of a real daemon killed as it answers a registration or a submission: the request it had
is answered 503 (try again), nothing half-made is left, and the next request is served by a new pool."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from prooflane.config import Config
from prooflane.devices import ProcessBackend
from tests.support.daemons import circom_files
from tests.support.engine import WAIT, served_on

TINY_SECTOR = {"size": 256, "seed": "07"}

T = TypeVar("T")


@pytest.fixture(scope="module")
def circom(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A .zkey of the tiny winning-post circuit and a good .wtns for it, in a folder of their own."""
    return circom_files(tmp_path_factory.mktemp("circom"))


class CrashingPool(ProcessBackend):
    """The process backend, where the pool process given the next call named in ``crash`` kills itself
    with SIGKILL instead (as a native crash in a parser would end it)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.crash: set[str] = set()

    async def run(self, call: Callable[..., T], *args: Any) -> T:
        if call.__name__ in self.crash:
            self.crash.discard(call.__name__)
            await super().run(signal.raise_signal, signal.SIGKILL)
        return await super().run(call, *args)


def _process_backend(config: Config) -> CrashingPool:
    cfg = config.resolved()
    return CrashingPool(pool_size=1, workers=len(cfg.devices), cores=cfg.core_budget)


@pytest.mark.timeout(240)
def test_a_pool_process_dying_during_a_registration_is_503_and_the_next_one_succeeds(
    engine_config: Callable[..., Config], circom: dict[str, Path], tmp_path: Path
) -> None:
    config = engine_config(allowed_roots=(circom["zkey"].parent,))
    backend = _process_backend(config)
    with served_on(config, backend) as url:
        before = set(backend.pool_pids())
        backend.crash.add("inspect_zkey")
        body = {"name": "mul", "zkey": str(circom["zkey"])}
        answer = httpx.post(f"{url}/v1/circuits", json=body, timeout=WAIT)
        assert answer.status_code == 503, answer.text
        assert "died" in answer.json()["detail"] and "try again" in answer.json()["detail"]
        assert answer.headers["retry-after"] == "1"
        circuits = tmp_path / "data" / "circuits"
        assert not circuits.exists() or list(circuits.iterdir()) == []
        again = httpx.post(f"{url}/v1/circuits", json=body, timeout=WAIT)
        assert again.status_code == 201, again.text
        assert set(backend.pool_pids()).isdisjoint(before)  # a new pool answered
        assert httpx.get(f"{url}/healthz", timeout=WAIT).status_code == 200


@pytest.mark.timeout(240)
def test_a_killed_pool_process_fails_the_request_it_had_and_the_next_job_is_proven(
    engine_config: Callable[..., Config], tmp_path: Path
) -> None:
    config = engine_config()
    backend = _process_backend(config)
    with served_on(config, backend) as url:
        pids = backend.pool_pids()
        assert pids, "the pool prepared the kinds' keys: it has a process"
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        body = {"kind": "winning-post", "sector": TINY_SECTOR, "job_id": "after-kill"}
        answer = httpx.post(f"{url}/v1/jobs", json=body, timeout=WAIT)
        assert answer.status_code == 503, answer.text
        assert "try again" in answer.json()["detail"]
        assert not (tmp_path / "data" / "sectors" / "after-kill").exists()
        again = httpx.post(f"{url}/v1/jobs", json=body, timeout=WAIT)
        assert again.status_code == 202, again.text
        proof = httpx.get(f"{url}/v1/jobs/after-kill/proof", params={"wait": WAIT}, timeout=WAIT + 10)
        assert proof.status_code == 200, proof.text
