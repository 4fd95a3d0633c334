"""The fast path is required where it is tested: under ``CI`` a build whose C extension does not load fails
the suite instead of skipping its tests; elsewhere those tests skip, saying why; and the process then
proves on the libraries, saying so."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from prooflane.groth16.arithmetic import SO_ENV

TEST = "tests/groth16/test_curvemath.py::test_field_vectors_are_what_the_extension_reads"
TESTS = ["tests/groth16/test_curvemath.py::test_small_msms_equal_the_library_s", TEST]


def _pytest(ci: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"} | {SO_ENV: "/nonexistent/_curvemath.so"}
    if ci:
        env["CI"] = "true"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", *TESTS],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip


@pytest.mark.parametrize("ci", [True, False], ids=["under CI", "elsewhere"])
def test_a_missing_extension_fails_under_ci_and_skips_elsewhere(ci: bool) -> None:
    done = _pytest(ci)
    assert "the C extension is required" in done.stdout, done.stdout
    if ci:
        assert done.returncode == 1 and " failed" in done.stdout
    else:
        assert done.returncode == 0 and " skipped" in done.stdout and " failed" not in done.stdout


def test_a_process_whose_extension_does_not_load_says_it_proves_on_the_libraries() -> None:
    env = dict(os.environ, **{SO_ENV: "/nonexistent/_curvemath.so"})
    code = "import json; from prooflane.groth16 import arithmetics; print(json.dumps(arithmetics()))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    said = done.stdout
    assert '"bn128": "libraries: the C extension is not built or does not load here' in said
