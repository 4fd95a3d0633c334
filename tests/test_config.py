"""The frozen Config: embedded defaults, TOML over them, clear errors naming the key."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from prooflane.config import DEFAULT_PORT, Config, RaySettings, default_threads
from prooflane.errors import ConfigError
from prooflane.logs import LOG_FORMATS, LOG_LEVELS

DOCS = Path(__file__).resolve().parents[1] / "docs" / "config.md"


def test_defaults_resolve_to_this_machine(tmp_path: Path) -> None:
    config = Config(data_dir=tmp_path).resolved()
    assert config.port == DEFAULT_PORT and config.host == "127.0.0.1" and config.profile == "tiny"
    assert config.devices and all(d.startswith("cpu:") for d in config.devices)
    assert config.workers_per_device == 1 and config.synthesis_workers == 1
    assert config.core_budget == 0  # no limit: every worker and synthesis process computes when it can
    assert config.memory_budget_bytes > 0 and config.keys_dir == tmp_path / "keys"
    assert config.prefetch_partitions == len(config.devices)


def test_toml_overrides_defaults_and_explicit_overrides_win(tmp_path: Path) -> None:
    path = tmp_path / "prooflane.toml"
    path.write_text(
        'data_dir = "/srv/prooflane"\nport = 9900\ndevices = ["cpu", "cpu"]\nlive_retention_secs = 5\n'
    )
    config = Config.load(path, port=9901, profile=None)
    assert config.data_dir == Path("/srv/prooflane") and config.port == 9901
    assert config.live_retention_secs == 5.0 and config.profile == "tiny"
    assert config.resolved().devices == ("cpu:0", "cpu:1")


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("prot = 1", "unknown key 'prot'"),
        ('port = "x"', "key 'port': expected int"),
        ("port = 0", "key 'port'"),
        ('profile = "huge"', "key 'profile'"),
        ('devices = ["gpu"]', "key 'devices'"),
        ('log_format = "xml"', "key 'log_format': expected one of text, json"),
        ('log_level = "loud"', "key 'log_level': expected one of debug, info, warning, error"),
        ("log_level = 20", "key 'log_level': expected str"),
        ('msm_tables = "yes"', "key 'msm_tables': expected true, false or \"auto\", got 'yes'"),
        ("msm_tables = 1", "key 'msm_tables': expected bool \\| str, got int 1"),
        ("msm_tables = true\n[ray]\naddress = 'auto'", "key 'msm_tables': the tables are kept by local"),
        ("port = ", "not valid TOML"),
    ],
)
def test_bad_config_names_the_key(tmp_path: Path, text: str, named: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError, match=named) as error:
        Config.load(path)
    assert str(path) in str(error.value)


def test_the_log_is_text_at_info_unless_the_file_says_otherwise(tmp_path: Path) -> None:
    assert (Config().log_format, Config().log_level) == ("text", "info")
    path = tmp_path / "prooflane.toml"
    path.write_text('log_format = "json"\nlog_level = "debug"\n')
    config = Config.load(path)
    assert (config.log_format, config.log_level) == ("json", "debug")
    assert (config.resolved().log_format, config.resolved().log_level) == ("json", "debug")


def test_the_log_keys_are_documented_with_every_value() -> None:
    text = (Path(__file__).resolve().parents[1] / "docs" / "config.md").read_text()
    for key, values in (("log_format", LOG_FORMATS), ("log_level", LOG_LEVELS)):
        [row] = [line for line in text.splitlines() if line.startswith(f"| `{key}` |")]
        assert [v for v in values if f"`{v}`" not in row] == [], key


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        Config.load(tmp_path / "nope.toml")


def test_the_ray_table_maps_to_flat_ray_keys(tmp_path: Path) -> None:
    path = tmp_path / "ray.toml"
    path.write_text('[ray]\naddress = "auto"\ndevice_cpus = 2\ninclude_dashboard = true\n')
    config = Config.load(path)
    assert config.ray == RaySettings(address="auto", device_cpus=2.0, include_dashboard=True)
    assert Config.load(None, ray_address="local").ray.address == "local"
    assert Config.load(None, ray_address="local", ray_device_cpus=3).ray.device_cpus == 3.0
    assert Config().ray.address == "" and not Config().ray.include_dashboard


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("[ray]\nadress = 'auto'", "unknown key 'ray_adress'"),
        ("ray = 1", "key 'ray': expected a table"),
        ("[ray]\ninclude_dashboard = 1", "key 'ray_include_dashboard': expected bool"),
        ("[ray]\nsynthesis_cpus = 0", "key 'ray_synthesis_cpus'"),
        ("ray_address = 'auto'\n[ray]\naddress = 'local'", "also given as 'ray_address'"),
    ],
)
def test_bad_ray_table_names_the_key(tmp_path: Path, text: str, named: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError, match=named):
        Config.load(path)


def test_an_explicit_ray_address_wins_over_the_ray_table(tmp_path: Path) -> None:
    path = tmp_path / "ray.toml"
    path.write_text('[ray]\naddress = "auto"\n')
    assert Config.load(path, ray_address="ray://head:10001").ray.address == "ray://head:10001"


def test_every_key_is_documented_in_docs_config() -> None:
    documented = set(re.findall(r"^\| `([a-z_.]+)` \|", DOCS.read_text(), re.M))
    keys = {f.name for f in dataclasses.fields(Config) if f.name != "ray"}
    keys |= {f"ray.{f.name}" for f in dataclasses.fields(RaySettings)}
    assert keys <= documented, sorted(keys - documented)


def test_the_thread_policy_shares_the_cores_among_the_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROOFLANE_THREADS", raising=False)
    assert [default_threads(cores, workers) for cores, workers in ((2, 2), (16, 16), (16, 2), (64, 4))] == [
        1, 1, 8, 16,
    ]  # fmt: skip
    assert default_threads(256, 1) == 64 and default_threads(1, 4) == 1  # at most MAX_THREADS, at least 1
    monkeypatch.setenv("PROOFLANE_THREADS", "5")  # the daemon's environment names it: that value
    assert default_threads(16, 16) == 5
    resolved = Config(devices=("cpu:0", "cpu:1"), workers_per_device=2).resolved()
    assert resolved.threads_per_call == 5
    assert Config(threads_per_call=7).resolved().threads_per_call == 7  # the config's key first
    with pytest.raises(ConfigError, match="threads_per_call"):
        Config(threads_per_call=-1)
