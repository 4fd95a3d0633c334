"""A real daemon whose data folder is on a small tmpfs that fills up (the tests need to mount one: root):
it answers 507 and 503 with the reason while the disk is full, and finishes every accepted job once there
is room again. (The journal's and the engine's own behaviour on a full disk: tests/engine/test_disk_full.py.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prooflane.cli.daemon_process import DaemonProcess
from prooflane.client import Client
from prooflane.errors import DaemonError
from prooflane.groth16 import Proof, VerificationKey, verify
from prooflane.models import InlineSector
from tests.support.daemons import KEYS_CACHE, TIMEOUT, wait_done, wait_until
from tests.support.disk import fill

pytestmark = [pytest.mark.timeout(120)]


def test_a_daemon_on_a_full_disk_answers_507_and_503_with_the_reason_then_finishes_every_job(
    small_disk: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    cache = tmp_path_factory.getbasetemp() / KEYS_CACHE  # the keys stay off the small disk
    keys = cache if cache.is_dir() else tmp_path_factory.mktemp("keys")
    config = tmp_path_factory.mktemp("full-disk") / "prooflane.toml"
    config.write_text(f"keys_dir = {json.dumps(str(keys))}\n")
    daemon = DaemonProcess(small_disk / "data", config_file=config, log_path=config.parent / "daemon.log")
    daemon.start(timeout=TIMEOUT)
    try:
        with Client(daemon.url) as client:
            ids = [client.submit("porep-c2", sector=InlineSector(size=256, seed=f"{n:02x}")) for n in (1, 2)]
            wait_until("a partition proven", lambda: client.job(ids[0]).partitions_done > 0)
            filler = fill(small_disk)
            wait_until("the daemon to notice", lambda: not client.health())
            reason = client.health_reason() or ""
            assert "journal.sqlite3 cannot be written (database or disk is full)" in reason, reason
            with pytest.raises(DaemonError) as refused:
                client.submit("winning-post", sector=InlineSector(size=256, seed="03"))
            assert refused.value.status == 507 and "disk is full" in refused.value.detail
            filler.unlink()
            views = wait_done(client, ids)
            assert [v.state for v in views] == ["done", "done"]
            vk = VerificationKey.from_json(client.verification_key("porep-c2"))
            for job_id in ids:
                found = client.proof(job_id)
                assert found is not None and len(found.partitions) == 10
                for part in found.partitions:
                    public = tuple(int(x) for x in part.public)
                    assert verify(vk, public, Proof.from_json(part.proof, public=public))
            assert client.health() and client.status()["invariants_ok"] is True
    finally:
        assert daemon.stop() == 0, daemon.log()
