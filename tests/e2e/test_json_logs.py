"""A daemon with ``log_format = "json"`` writes every line it logs as one JSON object, on standard error
and in ``prooflane.log``: the UNSAFE notice of the built-in kinds' keys (made by its pool processes, said
by the daemon itself) and "listening on" included. Started in a fresh data folder: the keys are made."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prooflane.cli.daemon_process import DaemonProcess

pytestmark = pytest.mark.timeout(300)


def _records(text: str) -> list[dict[str, object]]:
    lines = [line for line in text.splitlines() if line.strip()]
    plain = [line for line in lines if not line.startswith("{")]
    assert plain == [], plain  # every line one JSON object
    return [json.loads(line) for line in lines]


def test_every_line_of_a_json_logging_daemon_is_json_in_both_places(tmp_path: Path) -> None:
    config = tmp_path / "prooflane.toml"
    config.write_text('log_format = "json"\n')
    daemon = DaemonProcess(
        tmp_path / "data", profile="tiny", config_file=config, log_path=tmp_path / "stderr.log"
    )
    daemon.start(timeout=240)
    try:
        url = daemon.url
    finally:
        daemon.stop()
    for where in (tmp_path / "stderr.log", tmp_path / "data" / "prooflane.log"):
        records = _records(where.read_text())
        said = [str(r.get("message", r.get("msg", ""))) for r in records]
        unsafe = [m for m in said if "UNSAFE development keys" in m]
        assert len(unsafe) == 1 and "porep-c2" in unsafe[0], (where, said)
        assert f"listening on {url} (dashboard {url}/)" in said, (where, said)
        assert not any(
            "UNSAFE development key:" in m for m in said
        )  # no pool process says it in its own words
