"""`fleet stop` and `fleet restart` over a real sshd on loopback run a folder's program only where the folder
holds the fleet's claim and only the SSH user may write it; a `manage` token cannot name a folder, nor an ssh
option that writes on the fleet's machine.

Each folder holds a stand-in `venv/bin/prooflane` that writes its arguments beside it when it runs (the whole
deploy, with the real program, is tests/e2e/test_fleet_deploy.py). The fleet runs as its own process with
daemons in its config as a deploy leaves them (`deploy_dir`, `deploy_claim`); nothing answers at their
ports, which stop and restart do not need.
"""

from __future__ import annotations

import getpass
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.daemons import free_port
from tests.support.fleet import FleetProcess, Sshd, sshd_on_loopback

pytestmark = [pytest.mark.timeout(300)]

TOKEN = "claims-e2e-deploy-token"
MANAGE = "claims-e2e-manage-token"
CLAIM = "c0ffee" + "0" * 26


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    with sshd_on_loopback(tmp_path_factory) as server:
        yield server


def _folder(path: Path, held: str | None) -> Path:
    """A daemon's folder with a stand-in program that writes its arguments to ``ran`` when it runs, and
    ``held`` in ``.prooflane-claim`` (none: no claim file); the path of ``ran``."""
    program = path / "venv" / "bin" / "prooflane"
    program.parent.mkdir(parents=True)
    program.write_text('#!/bin/sh\necho "$@" >> "$(dirname "$0")/ran"\necho "done: $2"\n')
    program.chmod(0o755)
    if held is not None:
        (path / ".prooflane-claim").write_text(held)
        (path / ".prooflane-claim").chmod(0o600)
    return program.parent / "ran"


def _table(name: str, sshd: Sshd, folder: Path, claim: str | None) -> str:
    target = f"{getpass.getuser()}@127.0.0.1"
    table = (f'[[daemons]]\nname = "{name}"\nssh = "{target}"\nremote_port = {free_port()}\n'
             f"ssh_options = {json.dumps(sshd.options())}\ndeploy_dir = \"{folder}\"\n")  # fmt: skip
    return table + (f'deploy_claim = "{claim}"\n' if claim is not None else "")


@pytest.fixture
def fleet(sshd: Sshd, tmp_path: Path) -> Iterator[tuple[FleetProcess, dict[str, Path]]]:
    """The fleet, with four daemons its config says it deployed: ``claimed`` (the folder holds its claim),
    ``old`` (no claim in the config: a config from before claims, or a folder a token holder once named),
    ``other`` (the folder holds another id) and ``open`` (its claim, but every user may write its program)."""
    home = tmp_path / "fleet"
    home.mkdir()
    sshd.trust(home / "known_hosts")
    ran = {
        "claimed": _folder(tmp_path / "claimed", CLAIM),
        "old": _folder(tmp_path / "old", None),
        "other": _folder(tmp_path / "other", "f" * 32),
        "open": _folder(tmp_path / "open", CLAIM),
    }
    (tmp_path / "open" / "venv" / "bin" / "prooflane").chmod(0o757)
    claims = {"claimed": CLAIM, "old": None, "other": CLAIM, "open": CLAIM}
    tables = [_table(name, sshd, tmp_path / name, claims[name]) for name in ran]
    (home / "fleet.toml").write_text(
        f'token = "{TOKEN}"\nmanage_tokens = ["{MANAGE}"]\nssh_known_hosts_file = "{home / "known_hosts"}"\n'
        "deploy_healthy_secs = 30\n\n" + "\n".join(tables)
    )
    process = FleetProcess(home / "fleet.toml", home / "fleet.log")
    try:
        yield process, ran
    finally:
        process.stop()


def _post(fleet: FleetProcess, path: str, body: object = None) -> httpx.Response:
    auth = {"Authorization": f"Bearer {MANAGE}"}
    return httpx.post(f"{fleet.url}{path}", headers=auth, json=body, timeout=60)


def test_stop_and_restart_run_a_folders_program_only_where_the_fleet_claimed_it(
    fleet: tuple[FleetProcess, dict[str, Path]], tmp_path: Path
) -> None:
    process, ran = fleet
    user = f"{getpass.getuser()}@127.0.0.1"
    refused = {
        "old": f"old: the fleet holds no claim on its folder {tmp_path / 'old'} on {user} (no deploy_claim: "
        "deployed before the fleet kept claims): nothing was run there; deploy 'old' again to claim it",
        "other": f"other: the folder {tmp_path / 'other'} on {user} does not hold the fleet's claim "
        "(.prooflane-claim with the id its deploy wrote): nothing was run there; deploy 'other' again to "
        "claim it",
        "open": f"open: the folder {tmp_path / 'open'} on {user} is not the SSH user's alone "
        "(venv/bin/prooflane is owned by another user or writable by every user): nothing was run there; "
        "make it the SSH user's and not world-writable (chmod o-w), or deploy into a folder of the SSH "
        "user's own",
    }
    for name, why in refused.items():
        for verb in ("restart", "stop"):
            answer = _post(process, f"/fleet/daemons/{name}/{verb}")
            assert (answer.status_code, answer.json()["detail"]) == (409, why), answer.text
            assert not ran[name].exists(), name
    answer = _post(process, "/fleet/daemons/claimed/restart")
    assert answer.json() == {"name": "claimed", "restarted": "done: restart"}, answer.text
    answer = _post(process, "/fleet/daemons/claimed/stop")
    assert answer.json() == {"name": "claimed", "stopped": "done: stop"}, answer.text
    assert ran["claimed"].read_text().splitlines() == [
        "service restart --dir . --wait 30.0",
        "service stop --dir . --wait 60",
    ]
    log = process.log_path.read_text()
    assert "restart of daemon other on" in log and "does not hold the fleet's claim" in log


def test_a_manage_token_names_no_folder_and_no_file_for_the_fleets_ssh_to_write(
    fleet: tuple[FleetProcess, dict[str, Path]], sshd: Sshd, tmp_path: Path
) -> None:
    process, _ = fleet
    planted = tmp_path / "planted"
    planted_ran = _folder(planted, CLAIM)  # even a claim file the token holder wrote: no deploy recorded it
    written = tmp_path / "written-by-ssh"
    body = {"name": "planted", "ssh": f"{getpass.getuser()}@127.0.0.1", "ssh_options": sshd.options()}
    for extra, says in (
        ({"deploy_dir": str(planted)}, "key 'deploy_dir' is set by `prooflane fleet deploy` alone"),
        ({"deploy_dir": str(planted), "deploy_claim": CLAIM}, "key 'deploy_dir' is set by"),
        ({"ssh_options": [*sshd.options(), "-o", f"UserKnownHostsFile={written}", "-o",
                          "StrictHostKeyChecking=accept-new"]}, "option 'UserKnownHostsFile' is not allowed"),
    ):  # fmt: skip
        answer = _post(process, "/fleet/daemons", {**body, **extra})
        assert answer.status_code == 422 and says in answer.json()["detail"], answer.text
    assert _post(process, "/fleet/daemons", body).status_code == 201  # followed, never managed
    answer = _post(process, "/fleet/daemons/planted/restart")
    assert answer.status_code == 409 and "not deployed by the fleet" in answer.json()["detail"]
    assert not planted_ran.exists() and not written.exists()
    assert "planted" not in [d["name"] for d in process.status()["daemons"] if d["deploy_dir"]]
