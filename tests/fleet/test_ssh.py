"""What the fleet's ssh is told: the options it pins come before a daemon's own (ssh keeps the first value it
is given), on every ssh command it runs. The real ssh against a real sshd: tests/e2e/test_fleet.py and
tests/e2e/test_fleet_claims.py."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from prooflane.fleet.config import DaemonSpec
from prooflane.fleet.ssh import SshTunnels

pytestmark = pytest.mark.timeout(60)
PINNED = ["-o", "StrictHostKeyChecking=yes", "-o", "UpdateHostKeys=no"]


def _fake_ssh(folder: Path) -> tuple[Path, Path]:
    """An ``ssh`` that writes each of its command lines to ``calls`` (one JSON list a line), holds the
    master (``-N``) open and answers every other command at once."""
    calls = folder / "calls"
    script = folder / "ssh"
    script.write_text(
        "#!/usr/bin/env python3\n"
        "import json, sys, time\n"
        f"with open({str(calls)!r}, 'a') as out:\n"
        "    out.write(json.dumps(sys.argv[1:]) + '\\n')\n"
        "if '-N' in sys.argv:\n"
        "    time.sleep(30)\n"
    )
    script.chmod(0o755)
    return script, calls


async def _every_command(tunnels: SshTunnels, spec: DaemonSpec) -> None:
    try:
        await tunnels.run(spec, "true", within=10)
        await tunnels.socket_for(spec)
        await tunnels.forget(spec)
    finally:
        await tunnels.close()


@pytest.mark.parametrize("known_hosts", ["", "/etc/fleet/known_hosts"])
def test_the_fleets_own_ssh_options_come_first_on_every_command(tmp_path: Path, known_hosts: str) -> None:
    script, calls = _fake_ssh(tmp_path)
    spec = DaemonSpec(name="d", ssh="prover@h", ssh_options=("-p", "2222", "-o", "HostKeyAlias=gpu"))
    asyncio.run(_every_command(SshTunnels(5.0, ssh=str(script), known_hosts_file=known_hosts), spec))
    pinned = PINNED + (["-o", f"UserKnownHostsFile={known_hosts}"] if known_hosts else [])
    made = [json.loads(line) for line in calls.read_text().splitlines()]
    kinds = {"-N" if "-N" in c else c[c.index("-O") + 1] if "-O" in c else "run" for c in made}
    assert {"-N", "check", "forward", "cancel", "run"} <= kinds, made
    for argv in made:
        assert argv[:2] == ["-o", "BatchMode=yes"] and argv[2 : 2 + len(pinned)] == pinned, argv
        own = argv.index("HostKeyAlias=gpu")
        assert own > 2 + len(pinned) and not [a for a in argv if "KnownHosts" in a and a not in pinned]
