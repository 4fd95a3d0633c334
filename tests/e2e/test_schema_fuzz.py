"""The daemon's own OpenAPI schema, fuzzed by schemathesis against a real `prooflane serve` (tiny profile),
without and with a token: no 5xx; every answer conforms to the schema (status code, content type, headers,
body; a 405 carries Allow); requests the schema calls invalid are refused with a 4xx; and, with a token,
the mutating routes refuse requests without it.

All of schemathesis' checks run but one: ``positive_data_acceptance`` expects every request the schema
allows to be accepted, which a sector path or a .zkey path that does not exist on the daemon's machine can
never be. ``GET /v1/events`` is left out: a valid request opens a stream that does not end (its answers
are tested in test_api.py and test_e2e_daemon.py).

``PROOFLANE_SCHEMA_EXAMPLES`` sets the examples per operation (default 3, for `make test`); docs/operations.md
gives the figure of a longer run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.daemons import TIMEOUT, start_daemon

EXAMPLES = int(os.environ.get("PROOFLANE_SCHEMA_EXAMPLES", "3"))
RUN_SECS = TIMEOUT * 3 + 3 * EXAMPLES  # a bound for one run (1,000 examples took 8 to 16 minutes)
SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"


def schemathesis_command(url: str, token: str) -> list[str]:
    """The schemathesis run, as docs/operations.md gives it."""
    command = [
        str(SCHEMATHESIS), "run", f"{url}/openapi.json",
        "--checks", "all", "--exclude-checks", "positive_data_acceptance",
        "--exclude-path", "/v1/events",
        "--max-examples", str(EXAMPLES), "--request-timeout", "60", "--workers", "1",
        "--generation-database", "none", "--no-color",
    ]  # fmt: skip
    if token:
        command += ["--header", f"Authorization: Bearer {token}"]
    return command


@pytest.mark.timeout(RUN_SECS + TIMEOUT * 2)
@pytest.mark.parametrize("token", ["", "fuzz-token"], ids=["open", "token"])
def test_the_daemon_answers_as_its_schema_says_under_fuzzing(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, token: str
) -> None:
    if not SCHEMATHESIS.exists():
        pytest.fail("schemathesis is not installed: run `make setup` (it is in the dev extra)")
    daemon = start_daemon(tmp_path_factory, f"fuzz-{token or 'open'}", token=token)
    try:
        done = subprocess.run(
            schemathesis_command(daemon.url, token),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=RUN_SECS,
            check=False,
        )
    finally:
        daemon.stop()
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-8000:] + "\n" + daemon.log()[-3000:]
    counted = re.search(r"(\d+) generated, (\d+) passed", said)
    assert counted is not None, said[-3000:]
    assert int(counted[1]) > 0 and counted[1] == counted[2], counted[0]
    print(f"schemathesis, {'with' if token else 'without'} a token: {counted[0]}")
