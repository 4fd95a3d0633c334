"""The background builder of a key's tables (``msm_tables = "auto"``), as the engine runs it: a process
that reports success only when every section's tables are stored for the workers to map."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from prooflane.groth16 import BN128, read_zkey, setup, write_zkey
from prooflane.groth16 import _tablecache as cache
from prooflane.groth16.prover import BASES, key_table_bytes
from tests.support.groth16_samples import square_chain

BUILDER = "prooflane.devices.table_builder"


@pytest.fixture
def key_path(tmp_path: Path) -> Path:
    path = tmp_path / "k.zkey"
    write_zkey(path, setup(square_chain(BN128, 300)[0], seed=b"table builder"))
    return path


def _build(key_path: Path, tables: Path, *code: str) -> subprocess.CompletedProcess[str]:
    """The builder in a process of its own, told to store under ``tables``; ``code`` runs first in it."""
    run = [*code, f"from {BUILDER} import main", f"sys.exit(main([{str(key_path)!r}, {str(os.getpid())!r}]))"]
    return subprocess.run(
        [sys.executable, "-c", "import sys\n" + "\n".join(run)],
        env={**os.environ, cache.ENV: str(tables)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_builder_stores_every_section_then_finds_them_stored(key_path: Path, tmp_path: Path) -> None:
    tables = tmp_path / "msm-tables"
    first = _build(key_path, tables)
    assert first.returncode == 0, first.stderr
    report = json.loads(first.stdout.splitlines()[-1])
    key = read_zkey(key_path)
    assert report["built"] is True and sorted(report["sections"]) == sorted(BASES)
    assert report["bytes"] == key_table_bytes(BN128, key.n_vars, key.n_public, key.domain_size)
    assert sum(f.stat().st_size for f in tables.glob("*.tables")) == report["bytes"]
    again = _build(key_path, tables)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout.splitlines()[-1])["built"] is False


def test_a_folder_the_tables_cannot_be_stored_in_fails_before_any_build(
    key_path: Path, tmp_path: Path
) -> None:
    """Tables built in the builder's memory alone would be of no use to the workers, which map stored
    ones: the builder says why and builds nothing."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    built = _build(key_path, blocker / "msm-tables")
    assert built.returncode == 1 and built.stdout == ""
    assert built.stderr.strip().startswith(f"they cannot be stored in {blocker / 'msm-tables'}"), built.stderr


def test_tables_built_but_not_stored_are_a_failure(key_path: Path, tmp_path: Path) -> None:
    """A store that fails after the folder looked writable (a full disk, say): built in memory, which the
    builder does not report as stored."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    built = _build(
        key_path, blocker / "msm-tables", f"import {cache.__name__} as c", "c.not_storable = lambda: None"
    )
    assert built.returncode == 1 and built.stdout == ""
    assert built.stderr.strip() == f"built, but not stored ({', '.join(sorted(BASES))}): the write failed"
