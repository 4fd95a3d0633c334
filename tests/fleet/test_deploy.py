"""What a deploy sends before it reaches a host: the wheel of the running prooflane, the request merged
with the daemon as deployed last, and the daemon's config checked by the daemon's own rules. The deploy
over a real sshd is tests/e2e/test_fleet_deploy.py."""

from __future__ import annotations

import base64
import hashlib
import json
import tomllib
import zipfile
from pathlib import Path

import pytest

from prooflane.errors import ConfigError
from prooflane.fleet.config import DaemonSpec
from prooflane.fleet.deploy import DeployRequest
from prooflane.fleet.wheel import PACKAGE, build_wheel, wheel_version

pytestmark = pytest.mark.timeout(60)


def test_the_wheel_holds_the_running_package_its_dependencies_and_its_script(tmp_path: Path) -> None:
    path = build_wheel(tmp_path)
    version = wheel_version()
    assert path.name == f"prooflane-{version}-py3-none-any.whl"
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
            [p for p in PACKAGE.rglob("*") if p.is_file() and "__pycache__" not in p.parts])  # fmt: skip
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
