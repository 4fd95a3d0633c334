"""The fleet config: TOML in, checked, and written back without losing a key."""

from __future__ import annotations

import dataclasses
import stat
import tomllib
from pathlib import Path

import pytest
import tomli_w

from prooflane.errors import ConfigError
from prooflane.fleet.config import DaemonSpec, FleetConfig

EXAMPLE = """
token = "s3cret"
stale_after_secs = 4.0

[[daemons]]
name = "gpu-1"
url = "http://10.0.0.5:9821"
token = "daemon-token"
cost_per_hour = 2

[[daemons]]
name = "rented"
ssh = "prover@203.0.113.7"
remote_port = 9900
ssh_options = ["-p", "2222", "-i", "~/.ssh/fleet"]
"""


def test_config_loads_daemons_and_keys(tmp_path: Path) -> None:
    path = tmp_path / "fleet.toml"
    path.write_text(EXAMPLE)
    config = FleetConfig.load(path, port=0)
    assert config.port == 0 and config.token == "s3cret" and config.stale_after_secs == 4.0
    first, second = config.daemons
    assert first == DaemonSpec(
        name="gpu-1", url="http://10.0.0.5:9821", token="daemon-token", cost_per_hour=2.0
    )
    assert second.ssh == "prover@203.0.113.7" and second.remote_port == 9900
    assert second.ssh_options == ("-p", "2222", "-i", "~/.ssh/fleet")
    assert second.where == "ssh://prover@203.0.113.7:9900"


def test_a_missing_file_is_an_empty_fleet(tmp_path: Path) -> None:
    assert FleetConfig.load(tmp_path / "none.toml").daemons == ()


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('[[daemons]]\nname = "a"\n', "exactly one of url, ssh"),
        ('[[daemons]]\nname = "a"\nurl = "http://x:1"\nssh = "h"\n', "exactly one of url, ssh"),
        ('[[daemons]]\nname = "a b"\nurl = "http://x:1"\n', "'name'"),
        ('[[daemons]]\nname = "a"\nurl = "ftp://x"\n', "expected http(s)://host:port"),
        ('[[daemons]]\nname = "a"\nurl = "http://x:1"\ncolour = 3\n', "unknown key 'colour'"),
        ('[[daemons]]\nname = "a"\nurl = "http://x:1"\ncost_per_hour = "2"\n', "'cost_per_hour'"),
        (
            '[[daemons]]\nname = "a"\nurl = "http://x:1"\n[[daemons]]\nname = "a"\nurl = "http://y:1"\n',
            "repeated: a",
        ),
        ('[[daemons]]\nname = "a"\nssh = "-oProxyCommand=x"\n', "[user@]host"),
        ("poll_secs = 0\n", "'poll_secs'"),
        ('[[daemons]]\nurl = "http://x:1"\n', "name"),
    ],
)
def test_bad_config_is_refused_with_the_key(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "fleet.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        FleetConfig.load(path)
    assert problem in str(caught.value)
    assert str(path) in str(caught.value)


def test_save_round_trips_and_keeps_the_file_private(tmp_path: Path) -> None:
    path = tmp_path / "fleet.toml"
    path.write_text(EXAMPLE)
    config = FleetConfig.load(path)
    path.unlink()
    config.save(path)
    assert FleetConfig.load(path) == config
    assert tomllib.loads(path.read_text())["daemons"][1]["ssh_options"][1] == "2222"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # it holds tokens
    path.chmod(0o640)
    config.save(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640  # an existing file keeps its bits


def test_strings_that_need_escaping_survive(tmp_path: Path) -> None:
    spec = DaemonSpec(name="q", url="http://h:1", token="a\"b\\c'd")
    config = FleetConfig(daemons=(spec,))
    config.save(tmp_path / "f.toml")
    assert FleetConfig.load(tmp_path / "f.toml").daemons[0].token == "a\"b\\c'd"


@pytest.mark.parametrize("doc", ["config.md", "fleet.md"])
def test_every_key_is_documented(doc: str) -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / doc).read_text()
    for cls in (FleetConfig, DaemonSpec):
        for f in dataclasses.fields(cls):
            assert f"| `{f.name}` |" in text, f"{f.name} is missing from docs/{doc}"


# --- what a hostile caller or a bad day once got through ------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        ["-oProxyCommand=sh -c 'touch /tmp/pwned'"],
        ["-o", "ProxyCommand sh -c 'id'"],
        ["-o", "LocalCommand=id", "-o", "PermitLocalCommand=yes"],
        ["-o", "KnownHostsCommand=/bin/id"],
        ["-F", "/tmp/evil_config"],
        ["-J", "jump"],
        ["-p"],
        ["-o", "Port=22\nProxyCommand=id"],
    ],
)
def test_ssh_options_that_could_run_a_program_are_refused(options: list[str]) -> None:
    with pytest.raises(ConfigError, match="ssh_options"):
        DaemonSpec(name="d", ssh="prover@host", ssh_options=tuple(options))


def test_ssh_options_of_the_allowlist_pass_in_every_spelling() -> None:
    options = ("-p", "2222", "-p2222", "-i", "~/.ssh/k", "-lprover", "-o", "HostKeyAlias=gpu",
               "-oIdentitiesOnly=yes", "-o", "ConnectTimeout 5")  # fmt: skip
    assert DaemonSpec(name="d", ssh="prover@host", ssh_options=options).ssh_options == options


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["-o", "UserKnownHostsFile=/home/fleet/.bashrc"], "UserKnownHostsFile"),
        (["-ouserknownhostsfile /tmp/x"], "UserKnownHostsFile"),
        (["-o", "StrictHostKeyChecking=accept-new"], "StrictHostKeyChecking"),
        (["-oStrictHostKeyChecking no"], "StrictHostKeyChecking"),
        (["-o", "UpdateHostKeys=yes"], "UpdateHostKeys"),
    ],
)
def test_ssh_options_that_write_on_the_fleets_machine_are_refused_naming_them(
    options: list[str], named: str
) -> None:
    """With both, a token holder made the fleet's ssh append a host key line to a file of their choosing."""
    with pytest.raises(ConfigError) as refused:
        DaemonSpec(name="d", ssh="prover@host", ssh_options=tuple(options))
    assert str(refused.value).startswith(
        f"key 'ssh_options': daemon 'd': option {named!r} is not allowed: the fleet pins it"
    )


@pytest.mark.parametrize("key", ["deploy_dir", "deploy_claim"])
def test_a_daemon_added_at_run_time_cannot_name_its_folder(key: str) -> None:
    """``POST /fleet/daemons`` once took any ``deploy_dir``: stop and restart then ran a program there."""
    body = {"name": "d", "ssh": "prover@host", "deploy_dir": "/tmp/planted", "deploy_claim": "a" * 32}
    with pytest.raises(ConfigError, match=f"key '{key}' is set by `prooflane fleet deploy` alone"):
        DaemonSpec.added({k: v for k, v in body.items() if k in ("name", "ssh", key)})
    assert DaemonSpec.from_dict(body, source="fleet.toml").deploy_claim == "a" * 32  # the file keeps them


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"deploy_claim": "a" * 32}, "'deploy_claim': only with deploy_dir"),
        ({"deploy_dir": "/d", "deploy_claim": "A" * 32}, "'deploy_claim': expected the 32 hex digits"),
        ({"deploy_dir": "/d", "deploy_claim": "a" * 31}, "'deploy_claim': expected the 32 hex digits"),
    ],
)
def test_a_claim_is_the_id_a_deploy_wrote(values: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        DaemonSpec.from_dict({"name": "d", "ssh": "prover@host", **values}, source="fleet.toml")


def test_the_known_hosts_file_is_one_path() -> None:
    assert FleetConfig(ssh_known_hosts_file="~/.ssh/fleet_known_hosts").ssh_known_hosts_file
    for bad in ("/a b", "/a\n/b"):
        with pytest.raises(ConfigError, match="'ssh_known_hosts_file': expected one path without spaces"):
            FleetConfig(ssh_known_hosts_file=bad)


@pytest.mark.parametrize("target", ["-oProxyCommand=id", "host;id", "a b", "$(id)@h", "h`id`", "user@", "@h"])
def test_ssh_targets_must_be_a_user_and_a_host(target: str) -> None:
    with pytest.raises(ConfigError, match="'ssh'"):
        DaemonSpec(name="d", ssh=target)


@pytest.mark.parametrize("target", ["h", "prover@203.0.113.7", "p_1@gpu-1.example.org", "::1", "u@[fe80::1]"])
def test_ssh_targets_of_every_usual_form_pass(target: str) -> None:
    assert DaemonSpec(name="d", ssh=target).ssh == target


@pytest.mark.parametrize("url", ["http://h:99999", "http://[::1", "http://h:0", "http://:9821", "ftp://h:1"])
def test_daemon_urls_that_cannot_be_reached_are_refused_when_given(url: str) -> None:
    with pytest.raises(ConfigError, match="'url'"):
        DaemonSpec(name="d", url=url)


@pytest.mark.parametrize(
    "url",
    ["http://h:1/?x=1", "http://h:1?", "http://h:1/#top", "http://h:1#", "http://h:1\r\n", "http://h :1"],
)
def test_daemon_urls_with_a_query_a_fragment_or_a_control_character_are_refused(url: str) -> None:
    with pytest.raises(ConfigError, match=r"'url'.*(query or #fragment|space or control)"):
        DaemonSpec(name="d", url=url)


@pytest.mark.parametrize(
    "token", ["a\r\nX-Injected: 1", "new\nline", "tab\tbed", "nul\x00", "del\x7f", "tok😀en"]
)
def test_tokens_that_cannot_be_sent_in_a_header_are_refused_at_load(tmp_path: Path, token: str) -> None:
    with pytest.raises(ConfigError, match=r"'token'.*printable ASCII"):
        DaemonSpec(name="d", url="http://h:1", token=token)
    with pytest.raises(ConfigError, match=r"'token'.*printable ASCII"):
        FleetConfig(token=token)
    path = tmp_path / "fleet.toml"
    path.write_text(tomli_w.dumps({"daemons": [{"name": "d", "url": "http://h:1", "token": token}]}))
    with pytest.raises(ConfigError, match=r"fleet.toml: daemons\[0\]: key 'token'"):
        FleetConfig.load(path)


def test_a_password_in_a_url_is_never_shown() -> None:
    spec = DaemonSpec(name="d", url="http://admin:s3cret@10.0.0.5:9821/")
    assert spec.where == "http://10.0.0.5:9821" and "s3cret" not in spec.where
    assert spec.url == "http://admin:s3cret@10.0.0.5:9821/"  # still used to reach it


@pytest.mark.parametrize("token", ['a"b\\c', "sp ace", "~+/=-._", "'[]{}#"])
def test_any_token_round_trips_through_the_file(tmp_path: Path, token: str) -> None:
    path = tmp_path / "fleet.toml"
    config = FleetConfig(token=token, daemons=(DaemonSpec(name="d", url="http://h:1", token=token),))
    config.save(path)
    again = FleetConfig.load(path)
    assert again.token == token and again.daemons[0].token == token
