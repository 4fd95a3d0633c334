"""What a deploy sends before it reaches a host: the wheel of the running prooflane, the request merged
with the daemon as deployed last, and the daemon's config checked by the daemon's own rules. The deploy
over a real sshd is tests/e2e/test_fleet_deploy.py."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import tomllib
import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from prooflane.errors import ConfigError
from prooflane.fleet.claim import CLAIM_FILE, REFUSED, FolderRefused
from prooflane.fleet.config import DaemonSpec, FleetConfig
from prooflane.fleet.deploy import (
    _UNSUPPORTED,
    DeployError,
    DeployRequest,
    NotDeployed,
    arithmetic_note,
    deploy,
    restart,
    stop,
)
from prooflane.fleet.ssh import RemoteResult
from prooflane.fleet.wheel import PACKAGE, PURE_TAG, build_wheel, extension_tag, wheel_tag, wheel_version

pytestmark = pytest.mark.timeout(60)
EXT_SUFFIX = str(sysconfig.get_config_var("EXT_SUFFIX"))


def test_the_wheel_holds_the_running_package_its_dependencies_and_its_script(tmp_path: Path) -> None:
    path = build_wheel(tmp_path)
    version = wheel_version()
    assert path.name == f"prooflane-{version}-{wheel_tag()}.whl"
    with zipfile.ZipFile(path) as wheel:
        names = set(wheel.namelist())
        info = f"prooflane-{version}.dist-info"
        assert {
            "prooflane/__init__.py",
            "prooflane/fleet/page/index.html",
            "prooflane/dashboard/app.js",
            "prooflane/circuits/poseidon_params.json",
            f"{info}/METADATA",
            f"{info}/RECORD",
        } <= names
        assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
        assert len([n for n in names if n.startswith("prooflane/")]) == len(
            [p for p in PACKAGE.rglob("*") if p.is_file() and "__pycache__" not in p.parts
             and (not p.name.endswith(".so") or p.name.endswith(EXT_SUFFIX))])  # fmt: skip
        metadata = wheel.read(f"{info}/METADATA").decode()
        assert f"\nVersion: {version}\n" in metadata
        assert "Requires-Dist: numpy" in metadata  # pip brings the dependencies on the host
        assert "prooflane = prooflane.cli:main" in wheel.read(f"{info}/entry_points.txt").decode()
        for line in wheel.read(f"{info}/RECORD").decode().splitlines():
            name, digest, size = line.split(",")
            if digest:  # every file but RECORD itself is hashed, as pip checks
                data = wheel.read(name)
                hashed = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                assert digest == f"sha256={hashed}" and int(size) == len(data)
    assert wheel_version() == version  # the same files, the same version


def test_a_redeploy_keeps_what_the_last_deploy_set_unless_told() -> None:
    before = DaemonSpec(name="gpu-1", ssh="prover@10.0.0.7", remote_port=9900, ssh_options=("-p", "2222"),
                        token="kept", cost_per_hour=0.9,
                        deploy_dir="/home/prover/.prooflane/gpu-1")  # fmt: skip
    again = DeployRequest.from_dict("gpu-1", {}, before)
    assert (again.ssh, again.remote_port, again.ssh_options, again.token, again.deploy_dir) == (
        "prover@10.0.0.7", 9900, ("-p", "2222"), "kept", "/home/prover/.prooflane/gpu-1")  # fmt: skip
    moved = DeployRequest.from_dict("gpu-1", {"remote_port": 9901, "pip_args": ["--no-index"]}, before)
    assert moved.remote_port == 9901 and moved.pip_args == ("--no-index",) and moved.token == "kept"
    assert DeployRequest.from_dict("new", {"ssh": "h"}, None).folder == ".prooflane/new"


def test_the_daemons_config_is_the_deploys_keys_and_the_ones_given() -> None:
    body = {"ssh": "h", "remote_port": 9900, "token": "t",
            "config": {"devices": ["cpu:0"], "profile": "tiny"}}  # fmt: skip
    asked = DeployRequest.from_dict("gpu-1", body, None)
    written = tomllib.loads(asked.daemon_config("/srv/gpu-1"))
    assert written == {"devices": ["cpu:0"], "profile": "tiny", "host": "127.0.0.1", "port": 9900,
                       "token": "t", "data_dir": "/srv/gpu-1/data"}  # fmt: skip
    spec = asked.spec("/srv/gpu-1")
    assert (spec.ssh, spec.remote_port, spec.deploy_dir, spec.where) == (
        "h",
        9900,
        "/srv/gpu-1",
        "ssh://h:9900",
    )


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"ssh": "h", "pip_args": "--no-index"}, "'pip_args': expected a list of strings"),
        ({"ssh": "h", "config": {"token": "x"}}, "config key 'token' is set by the deploy itself"),
        ({"ssh": "h", "config": {"colour": 1}}, "unknown key 'colour'"),
        ({"ssh": "h", "python": "python3\nrm"}, "'python': expected one line"),
        ({"ssh": "h", "deploy_dir": "a\nb"}, "'deploy_dir': expected one line"),
        ({"ssh": "h", "remote_port": 0}, "'remote_port'"),
        ({"ssh": "h", "cost_per_hour": -1}, "'cost_per_hour'"),
    ],
)
def test_a_request_that_cannot_be_deployed_is_refused_naming_the_key(
    body: dict[str, object], says: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        DeployRequest.from_dict("gpu-1", body, None)
    assert says in str(refused.value)


def test_deploy_dir_belongs_to_a_daemon_reached_over_ssh() -> None:
    with pytest.raises(ConfigError, match="deploy_dir"):
        DaemonSpec(name="a", url="http://h:1", deploy_dir="/x")


def test_what_a_redeploy_does_not_say_is_what_the_last_deploy_into_the_folder_used() -> None:
    first = DeployRequest.from_dict("gpu-1", {"ssh": "h", "python": "/opt/py/bin/python3",
                                              "pip_args": ["--no-index", "--find-links", "/srv/wheels"],
                                              "config": {"profile": "tiny"}}, None)  # fmt: skip
    earlier = json.loads(first.settled({}).record())
    again = DeployRequest.from_dict("gpu-1", {"ssh": "h"}, None).settled(earlier)
    assert again.python == "/opt/py/bin/python3"
    assert again.pip_args == ("--no-index", "--find-links", "/srv/wheels")
    assert tomllib.loads(again.daemon_config("/srv/gpu-1"))["profile"] == "tiny"
    told = DeployRequest.from_dict("gpu-1", {"ssh": "h", "pip_args": [], "config": {}}, None).settled(earlier)
    assert told.pip_args == () and "profile" not in tomllib.loads(told.daemon_config("/srv/gpu-1"))
    fresh = DeployRequest.from_dict("gpu-1", {"ssh": "h"}, None).settled({"python": 3, "config": "x"})
    assert (fresh.python, fresh.pip_args, fresh.config) == ("python3", (), {})  # a damaged record: defaults


def _compiled(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as opened:
        return [n for n in opened.namelist() if n.endswith((".so", ".pyd"))]


def _wheel_file(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as opened:
        return opened.read(f"prooflane-{wheel.name.split('-')[1]}.dist-info/WHEEL").decode()


def test_the_wheel_with_the_c_extension_is_tagged_for_its_platform(tmp_path: Path) -> None:
    if not list(PACKAGE.rglob(f"*{EXT_SUFFIX}")):
        pytest.skip("no C extension is built into the package here")
    wheel = build_wheel(tmp_path)
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    assert extension_tag().startswith(f"{tag}-{tag}") and extension_tag().endswith(
        sysconfig.get_platform().replace("-", "_").replace(".", "_"))  # fmt: skip
    assert wheel.name.endswith(f"-{extension_tag()}.whl") and wheel_tag() == extension_tag()
    assert [n.rsplit("/", 1)[-1] for n in _compiled(wheel)] == [
        p.name for p in sorted(PACKAGE.rglob(f"*{EXT_SUFFIX}"))]  # fmt: skip
    assert f"Tag: {extension_tag()}\n" in _wheel_file(wheel) and "Root-Is-Purelib: false" in _wheel_file(
        wheel
    )


def test_the_pure_wheel_has_no_compiled_file_and_fits_any_platform(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path, extension=False)
    assert wheel.name == f"prooflane-{wheel_version(extension=False)}-{PURE_TAG}.whl"
    assert _compiled(wheel) == []
    assert f"Tag: {PURE_TAG}\n" in _wheel_file(wheel) and "Root-Is-Purelib: true" in _wheel_file(wheel)


def _pip_would_install(wheel: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--no-index", "--no-input",
         "--disable-pip-version-check", "--target", str(wheel.parent / "target"), str(wheel)],
        capture_output=True, text=True, timeout=50, check=False,
    )  # fmt: skip


def test_pip_installs_the_tagged_wheel_here_and_refuses_it_on_another_platform(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    if wheel_tag() == PURE_TAG:
        pytest.skip("no C extension is built into the package here")
    assert _pip_would_install(wheel).returncode == 0
    elsewhere = wheel.with_name(wheel.name.replace(extension_tag(), "cp311-cp311-win_amd64"))
    wheel.rename(elsewhere)
    refused = _pip_would_install(elsewhere)
    assert (
        refused.returncode != 0 and _UNSUPPORTED in refused.stdout + refused.stderr
    )  # what deploy looks for


class _Host:
    """A host for a deploy, answering each command as a real one would: it holds an empty folder, refuses
    wheels tagged for the fleet's platform when ``refuses_extension``, and its installed prooflane says
    ``arithmetic`` (or, with the pure wheel, that the C extension is not built)."""

    def __init__(
        self,
        *,
        refuses_extension: bool = False,
        arithmetic: dict[str, str] | None = None,
        token_status: int = 200,
    ) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="plhost-"))  # a short path: its daemon's Unix socket
        self.refuses_extension = refuses_extension
        self.arithmetic = arithmetic or {"bn128": "c-extension", "bls12381": "c-extension"}
        self.token_status = token_status  # what its daemon answers the deployed daemon's token
        self.sent: list[str] = []  # the wheels copied, in order
        self.installed: str | None = None
        self.asked: list[str] = []  # the request lines its daemon answered
        self.commands: list[tuple[str, bytes]] = []  # every command run on it, with its standard input
        self.server: asyncio.Server | None = None

    async def socket_for(self, spec: DaemonSpec) -> Path:
        path = self.folder / "daemon.sock"
        if self.server is None:
            self.server = await asyncio.start_unix_server(self._answer, path)
        return path

    async def deploy(self, fleet: Any, request: DeployRequest) -> dict[str, Any]:
        """``deploy`` onto this host; its daemon's port closed after."""
        try:
            return await deploy(fleet, request)
        finally:
            if self.server is not None:
                self.server.close()
                await self.server.wait_closed()
            shutil.rmtree(self.folder, ignore_errors=True)

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        self.asked.append(head.split("\r\n", 1)[0])
        status = self.token_status if "/v1/logs" in head else 200
        writer.write(f"HTTP/1.1 {status} X\r\ncontent-length: 2\r\n\r\n{{}}".encode())
        await writer.drain()
        writer.close()

    async def run(self, spec: DaemonSpec, command: str, *, stdin: bytes = b"", within: float) -> RemoteResult:
        self.commands.append((command, stdin))
        if command.endswith("&& pwd"):
            return RemoteResult(0, "/srv/gpu-1\n", "")
        if "wheels/.upload" in command:
            self.sent.append(command.rsplit("wheels/", 1)[-1].strip("'"))
            return RemoteResult(0, "", "")
        if "pip install" in command:
            wheel = command.rsplit("wheels/", 1)[-1].strip("'")
            if self.refuses_extension and not wheel.endswith(f"-{PURE_TAG}.whl"):
                return RemoteResult(1, "", f"ERROR: {wheel} {_UNSUPPORTED}.\n")
            self.installed = wheel
            return RemoteResult(0, f"Successfully installed {wheel}\n", "")
        if "g.arithmetics()" in command:
            said = self.arithmetic
            if self.installed is not None and self.installed.endswith(f"-{PURE_TAG}.whl"):
                said = dict.fromkeys(said, "libraries: the C extension is not built")
            return RemoteResult(0, json.dumps(said) + "\n", "")
        if "[ -x venv/bin/prooflane ]" in command:
            return RemoteResult(1, "", "")  # no earlier daemon in the folder
        if "service start" in command:
            return RemoteResult(0, "started: supervisor pid 7; /healthz says it can work\n", "")
        return RemoteResult(0, "", "")  # reading deploy.json (none), the venv, the config files


def _deploy(host: _Host) -> dict[str, Any]:
    followed: list[DaemonSpec] = []

    async def put(spec: DaemonSpec) -> None:
        followed.append(spec)

    fleet = SimpleNamespace(
        config=FleetConfig(), tunnels=host, operations=set(), stopped={}, put=put, followers={}
    )
    request = DeployRequest.from_dict("gpu-1", {"ssh": "prover@10.0.0.7"}, None)
    done = asyncio.run(host.deploy(fleet, request))
    assert [s.name for s in followed] == ["gpu-1"]
    assert host.asked == ["GET /healthz HTTP/1.1", "GET /v1/logs?lines=1 HTTP/1.1"]  # asked where followed
    return done


def test_a_host_that_refuses_the_extension_gets_the_pure_wheel_and_one_line_saying_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    if wheel_tag() == PURE_TAG:
        pytest.skip("no C extension is built into the package here")
    host = _Host(refuses_extension=True)
    with caplog.at_level(logging.WARNING, logger="prooflane.fleet"):
        done = _deploy(host)
    assert [w.endswith(f"-{extension_tag()}.whl") for w in host.sent] == [True, False]
    assert host.installed == host.sent[1] and host.installed.endswith(f"-{PURE_TAG}.whl")
    note = done["arithmetic_note"]
    assert note == (
        "gpu-1 on prover@10.0.0.7 will prove on the libraries, the slower arithmetic: pip refused the "
        f"fleet's C extension (built for {extension_tag()}) there"
    )
    assert done["arithmetic"] == dict.fromkeys(
        ("bn128", "bls12381"), "libraries: the C extension is not built"
    )
    assert done["version"] == host.installed.split("-")[1]
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [note]


def test_a_host_that_installs_and_loads_the_extension_says_nothing_more() -> None:
    host = _Host()
    done = _deploy(host)
    assert host.sent == [host.installed] and done["arithmetic_note"] is None
    assert done["arithmetic"] == {"bn128": "c-extension", "bls12381": "c-extension"}


def test_a_deploy_whose_daemon_does_not_take_its_token_where_the_fleet_looks_follows_nothing() -> None:
    host = _Host(token_status=401)  # another daemon answers at that port
    followed: list[DaemonSpec] = []

    async def put(spec: DaemonSpec) -> None:
        followed.append(spec)

    fleet = SimpleNamespace(
        config=FleetConfig(), tunnels=host, operations=set(), stopped={}, put=put, followers={}
    )
    request = DeployRequest.from_dict("gpu-1", {"ssh": "prover@10.0.0.7", "remote_port": 9300}, None)
    with pytest.raises(DeployError, match=r"gpu-1: started, but what answers at port 9300 on prover@10.0.0.7 "
                       r"is not it \(/healthz 200, its token 401\)"):  # fmt: skip
        asyncio.run(host.deploy(fleet, request))
    assert followed == []


def test_a_host_whose_prooflane_proves_on_the_libraries_is_named_from_what_it_says() -> None:
    host = _Host(arithmetic={"bn128": "c-extension", "bls12381": "libraries: PROOFLANE_NATIVE=0"})
    done = _deploy(host)
    assert done["arithmetic_note"] == (
        "gpu-1 on prover@10.0.0.7: bls12381 proves on the libraries, the slower arithmetic"
        " (PROOFLANE_NATIVE=0)"
    )
    assert arithmetic_note("gpu-1", "h", None, None) is None  # the host did not say: nothing claimed


def test_a_deploy_claims_its_folder_last_and_runs_the_folders_programs_only_once_it_is_checked() -> None:
    host = _Host()
    followed: list[DaemonSpec] = []

    async def put(spec: DaemonSpec) -> None:
        followed.append(spec)

    fleet = SimpleNamespace(
        config=FleetConfig(), tunnels=host, operations=set(), stopped={}, put=put, followers={}
    )
    asyncio.run(host.deploy(fleet, DeployRequest.from_dict("gpu-1", {"ssh": "prover@10.0.0.7"}, None)))
    (spec,) = followed
    assert len(spec.deploy_claim) == 32 and int(spec.deploy_claim, 16) >= 0
    claimed = [c for c, stdin in host.commands if stdin == spec.deploy_claim.encode()]
    assert claimed == [f"cd /srv/gpu-1 && umask 077 && cat > {CLAIM_FILE}.new && mv -f {CLAIM_FILE}.new "
                       f"{CLAIM_FILE}"]  # fmt: skip
    assert host.commands[-1][0] == claimed[0]  # after the daemon answered as deployed: nothing else follows
    assert not [c for c, _ in host.commands if spec.deploy_claim in c]  # never on a command line
    running = [c for c, _ in host.commands if " && venv/bin/" in c]  # pip, the arithmetic, the start
    assert len(running) == 3 and all(f"{REFUSED} unsafe" in c for c in running), running


class _Shell:
    """A host that is this machine: each command run by ``sh``, as sshd runs it with the user's shell."""

    def __init__(self) -> None:
        self.commands: list[str] = []

    async def run(self, spec: DaemonSpec, command: str, *, stdin: bytes = b"", within: float) -> RemoteResult:
        self.commands.append(command)
        done = await asyncio.create_subprocess_exec(
            "sh", "-c", command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(done.communicate(stdin), within)
        return RemoteResult(done.returncode or 0, out.decode(), err.decode())


def _managed(folder: Path, deploy_claim: str) -> tuple[Any, _Shell, Path]:
    """A fleet that follows gpu-1, deployed (by its config) into ``folder``, where a program is planted."""
    program = folder / "venv" / "bin" / "prooflane"
    program.parent.mkdir(parents=True)
    program.write_text('#!/bin/sh\necho "$@" >> "$(dirname "$0")/ran"\necho "done: $2"\n')
    program.chmod(0o755)
    spec = DaemonSpec(name="gpu-1", ssh="prover@h", deploy_dir=str(folder), deploy_claim=deploy_claim)
    shell = _Shell()
    fleet = SimpleNamespace(config=FleetConfig(deploy_healthy_secs=5.0), tunnels=shell, operations=set(),
                            stopped={}, followers={"gpu-1": SimpleNamespace(spec=spec)})  # fmt: skip
    return fleet, shell, program.parent / "ran"


@pytest.mark.parametrize("operation", [restart, stop])
def test_stop_and_restart_run_nothing_in_a_folder_that_does_not_hold_the_fleets_claim(
    tmp_path: Path, operation: Any
) -> None:
    """The folder was named by whoever may add a daemon (a ``manage`` token), with a script planted in it:
    stop and restart ran it as the fleet's SSH user."""
    fleet, _, ran = _managed(tmp_path, "a" * 32)
    (tmp_path / CLAIM_FILE).write_text("b" * 32)  # whoever planted the folder cannot know the fleet's id
    with pytest.raises(FolderRefused, match=r"gpu-1: the folder .* does not hold the fleet's claim"):
        asyncio.run(operation(fleet, "gpu-1"))
    assert not ran.exists()
    assert fleet.operations == set() and fleet.stopped == {}


@pytest.mark.parametrize("operation", [restart, stop])
def test_a_daemon_deployed_before_claims_is_refused_saying_to_deploy_it_again(
    tmp_path: Path, operation: Any
) -> None:
    fleet, shell, ran = _managed(tmp_path, "")  # a fleet config written before claims were kept
    with pytest.raises(NotDeployed) as refused:
        asyncio.run(operation(fleet, "gpu-1"))
    assert str(refused.value) == (
        f"gpu-1: the fleet holds no claim on its folder {tmp_path} on prover@h (no deploy_claim: deployed "
        "before the fleet kept claims): nothing was run there; deploy 'gpu-1' again to claim it"
    )
    assert shell.commands == [] and not ran.exists()


def test_stop_and_restart_run_the_program_of_a_folder_the_fleet_claimed(tmp_path: Path) -> None:
    fleet, _, ran = _managed(tmp_path, "a" * 32)
    (tmp_path / CLAIM_FILE).write_text("a" * 32)
    assert asyncio.run(restart(fleet, "gpu-1")) == "done: restart"
    assert asyncio.run(stop(fleet, "gpu-1")) == "done: stop"
    assert ran.read_text().splitlines() == [
        "service restart --dir . --wait 5.0",
        "service stop --dir . --wait 60",
    ]
    assert "gpu-1" in fleet.stopped
