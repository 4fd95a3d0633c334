"""The fleet's claim on a folder it deployed, checked by the host's own shell: the lines of
:func:`prooflane.fleet.claim.guarded` run here by each POSIX shell there is (dash, bash, zsh), in a folder
where a planted ``venv/bin/prooflane`` leaves a mark when it runs. Over a real sshd:
tests/e2e/test_fleet_claims.py."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from prooflane.fleet import claim
from prooflane.fleet.claim import CLAIM_FILE, REFUSED_EXIT, guarded, refusal
from prooflane.fleet.ssh import RemoteResult

pytestmark = pytest.mark.timeout(60)
SHELLS = [s for s in ("dash", "bash", "zsh") if shutil.which(s)]
CLAIM = "0123456789abcdef" * 2
COMMAND = "venv/bin/prooflane service restart --dir . --wait 60"


def _planted(folder: Path) -> Path:
    """``folder`` with a ``venv/bin/prooflane`` that writes its arguments to ``ran`` beside it."""
    program = folder / "venv" / "bin" / "prooflane"
    program.parent.mkdir(parents=True)
    program.write_text('#!/bin/sh\necho "$@" > "$(dirname "$0")/ran"\necho "restarted: pid 7"\n')
    program.chmod(0o755)
    (folder / "data").mkdir()
    return program.parent / "ran"


def _claimed(folder: Path, claim_id: str = CLAIM) -> None:
    (folder / CLAIM_FILE).write_text(claim_id)
    (folder / CLAIM_FILE).chmod(0o600)


def _run(shell: str, folder: Path, claim_id: str | None) -> RemoteResult:
    line, stdin = guarded(str(folder), COMMAND, claim_id)
    assert claim_id is None or claim_id not in line  # never on a command line (ps shows those to all)
    done = subprocess.run([shell, "-c", line], input=stdin, capture_output=True, timeout=30, check=False)
    return RemoteResult(done.returncode, done.stdout.decode(), done.stderr.decode())


def _refused(result: RemoteResult, folder: Path) -> str:
    said = refusal(result, name="gpu-1", host="prover@h", folder=str(folder))
    assert said is not None, result
    return said


@pytest.fixture(params=SHELLS)
def shell(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_the_folders_own_program_runs_where_the_claim_is_the_fleets(shell: str, tmp_path: Path) -> None:
    ran = _planted(tmp_path)
    _claimed(tmp_path)
    result = _run(shell, tmp_path, CLAIM)
    assert (result.code, result.out) == (0, "restarted: pid 7\n"), result
    assert refusal(result, name="gpu-1", host="prover@h", folder=str(tmp_path)) is None
    assert ran.read_text() == "service restart --dir . --wait 60\n"


@pytest.mark.parametrize("held", ["none", "another", "a link to the right one", "longer", "a folder"])
def test_a_folder_without_the_fleets_claim_runs_nothing(shell: str, tmp_path: Path, held: str) -> None:
    """A folder named by whoever could write one (a ``manage`` token once could): the script planted there
    ran as the fleet's SSH user."""
    ran = _planted(tmp_path)
    marker = tmp_path / CLAIM_FILE
    if held == "another":
        _claimed(tmp_path, "f" * 32)
    elif held == "a link to the right one":
        (tmp_path / "elsewhere").write_text(CLAIM)
        marker.symlink_to(tmp_path / "elsewhere")
    elif held == "longer":
        _claimed(tmp_path, f"{CLAIM}\nmore")
    elif held == "a folder":
        marker.mkdir()
    result = _run(shell, tmp_path, CLAIM)
    assert result.code == REFUSED_EXIT and not ran.exists(), result
    assert _refused(result, tmp_path) == (
        f"gpu-1: the folder {tmp_path} on prover@h does not hold the fleet's claim (.prooflane-claim with "
        "the id its deploy wrote): nothing was run there; deploy 'gpu-1' again to claim it"
    )


@pytest.mark.parametrize("where", [".", "venv", "venv/bin", "venv/bin/prooflane", "prooflane.toml"])
def test_a_folder_every_user_may_write_runs_nothing(shell: str, tmp_path: Path, where: str) -> None:
    ran = _planted(tmp_path)
    _claimed(tmp_path)
    (tmp_path / "prooflane.toml").write_text("")
    path = tmp_path / where
    path.chmod(path.stat().st_mode | 0o002)
    for claim_id in (CLAIM, None):  # a deploy's own runs check the folder too
        result = _run(shell, tmp_path, claim_id)
        assert result.code == REFUSED_EXIT and not ran.exists(), result
        shown = "." if where == "." else where
        assert _refused(result, tmp_path) == (
            f"gpu-1: the folder {tmp_path} on prover@h is not the SSH user's alone ({shown} is owned by "
            "another user or writable by every user): nothing was run there; make it the SSH user's and "
            "not world-writable (chmod o-w), or deploy into a folder of the SSH user's own"
        )


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_folder_holding_another_users_file_runs_nothing(shell: str, tmp_path: Path) -> None:
    ran = _planted(tmp_path)
    _claimed(tmp_path)
    os.chown(tmp_path / "venv" / "bin" / "prooflane", 65534, 65534)  # nobody's
    result = _run(shell, tmp_path, CLAIM)
    assert result.code == REFUSED_EXIT and not ran.exists(), result
    assert "(venv/bin/prooflane is owned by another user" in _refused(result, tmp_path)


def test_what_is_never_run_and_a_group_that_may_write_are_left_alone(shell: str, tmp_path: Path) -> None:
    """The daemon's data (written by the daemon, under the user's umask) and the wheels are not checked; a
    group that may write is trusted (a user's own group, umask 002)."""
    ran = _planted(tmp_path)
    _claimed(tmp_path)
    (tmp_path / "data" / "journal").write_text("")
    (tmp_path / "data" / "journal").chmod(0o666)
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "x.whl").write_text("")
    (tmp_path / "wheels" / "x.whl").chmod(0o666)
    (tmp_path / "venv" / "bin").chmod(0o775)
    (tmp_path / "link").symlink_to("/tmp")  # a link's own mode (0777) means nothing
    result = _run(shell, tmp_path, CLAIM)
    assert result.code == 0 and ran.exists(), result


def test_a_program_that_exits_as_a_refusal_does_is_not_taken_for_one(tmp_path: Path) -> None:
    said = RemoteResult(REFUSED_EXIT, "", "its own words\n")
    assert refusal(said, name="gpu-1", host="h", folder=str(tmp_path)) is None


def test_each_claim_is_new() -> None:
    made = {claim.new() for _ in range(100)}
    assert len(made) == 100 and all(len(c) == 32 and int(c, 16) >= 0 for c in made)
