"""`prooflane serve --ray local`: a real daemon whose engine runs on a Ray instance it started itself.

Skipped without the ``ray`` extra."""

from __future__ import annotations

from pathlib import Path

import pytest

from prooflane.cli.daemon_process import DaemonProcess
from prooflane.client import Client
from prooflane.groth16 import Proof, VerificationKey, verify
from prooflane.models import InlineSector

pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'prooflane[ray]')")
pytestmark = [pytest.mark.timeout(300)]


class RayDaemon(DaemonProcess):
    def command(self) -> list[str]:
        return [*super().command(), "--ray", "local"]


def test_serve_with_ray_local_proves_and_stops_cleanly(tmp_path: Path, keys_dir: Path) -> None:
    config = tmp_path / "prooflane.toml"
    config.write_text(
        f'keys_dir = "{keys_dir}"\ndevices = ["cpu"]\nworkers_per_device = 1\nsynthesis_workers = 1\n'
        "[ray]\ninclude_dashboard = false\n"
    )
    daemon = RayDaemon(tmp_path / "data", config_file=config)
    with daemon, Client(daemon.url) as client:
        job_id = client.submit("winning-post", sector=InlineSector(size=256, seed="07"))
        proofs = client.proof(job_id, wait=120)
        assert proofs is not None and len(proofs.partitions) == 1
        vk = VerificationKey.from_json(client.verification_key("winning-post"))
        part = proofs.partitions[0]
        public = tuple(int(x) for x in part.public)
        assert verify(vk, public, Proof.from_json(part.proof, public=public))
        status = client.status()
        assert status["invariants_ok"] is True and [w["worker_id"] for w in status["workers"]] == ["cpu:0/w0"]
    assert daemon.stop() == 0
