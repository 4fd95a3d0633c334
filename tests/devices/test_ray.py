"""The ray backend's settings and which call keeps its data in the object store (no Ray instance started;
the backend on a local cluster is tests/e2e/test_ray_backend.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from prooflane.config import Config
from prooflane.devices import RayBackend

pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'prooflane[ray]')")


def test_settings_come_from_the_config(tmp_path: Path) -> None:
    config = Config.load(None, data_dir=str(tmp_path), ray_address="ray://head:10001", ray_device_cpus=2.0)
    settings = RayBackend.from_config(config).settings
    assert settings.address == "ray://head:10001" and settings.device_cpus == 2.0
    assert settings.include_dashboard is False


def test_synthesis_is_the_call_whose_data_stays_in_the_object_store() -> None:
    from prooflane.devices.ray import KEEP_REMOTE
    from prooflane.kinds import synthesize_partition

    assert f"{synthesize_partition.__module__}.{synthesize_partition.__qualname__}" in KEEP_REMOTE
