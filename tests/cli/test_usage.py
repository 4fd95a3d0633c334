"""Wrong usages of the CLI: each is one line on standard error that says what to do, exit 2 (a usage error)
or 1 (a refused request), never a traceback; help shows values, never Python types; `--url` forms.

None of these needs a daemon: a usage error is found before any request is sent, and the refused ones name
a port where nothing listens.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prooflane.cli.entry import app
from prooflane.client import Client, normalize_url
from tests.support.daemons import free_port

pytestmark = pytest.mark.timeout(60)
runner = CliRunner()
CLI = [sys.executable, "-c", "from prooflane.cli import main; main()"]
USAGE, REFUSED = 2, 1
SECTOR = ["--sector", "s1"]


NOWHERE = f"http://127.0.0.1:{free_port()}"
INPUTS = Path(__file__).parent / "no-such-inputs.json"

# (arguments, exit status, what the one line says)
WRONG = [
    (["submit", "--kind", "porep-c2"], USAGE, "--kind porep-c2 needs --sector NAME"),
    (["submit", "--kind", "porep-c2", *SECTOR, "--priority", "urgent"], USAGE,
     "--priority: expected 'critical', 'high' or 'normal', not 'urgent'"),
    (["submit", "--kind", "porep-c2", *SECTOR, "--randomness", "xyz"], USAGE,
     "--randomness: expected 1 to 64 bytes as hex"),
    (["submit", "--kind", "porep-c2", *SECTOR, "--job-id", "bad!"], USAGE,
     "--job-id: expected 1-64 characters of A-Z a-z 0-9 . _ - starting with a letter or digit, not 'bad!'"),
    (["submit", "--kind", "porep-c2", *SECTOR, "--job-id", "x" * 65], USAGE, "--job-id: expected 1-64"),
    (["submit", "--kind", "circom", "--sector", "X"], USAGE, "--sector is for the storage kinds"),
    (["submit", "--kind", "circom", "--input", "a.json"], USAGE, "--kind circom needs --circuit NAME"),
    (["submit", "--kind", "circom", "--circuit", "c"], USAGE, "needs --input FILE"),
    (["submit", "--kind", "circom", "--circuit", "c", "--input", "a.json", "--witness", "w.wtns"], USAGE,
     "give --input or --witness, not both"),
    (["submit", "--kind", "circom", "--circuit", "c", "--input", str(INPUTS)], USAGE,
     f"--input {INPUTS}: cannot read it"),
    (["submit", "--kind", "winning-post", *SECTOR, "--input", "a.json"], USAGE,
     "--input: only for --kind circom, not winning-post"),
    (["submit"], USAGE, "Missing option '--kind' (see 'prooflane submit --help')"),
    (["submit", "--kind", "porep-c2", "--sector"], USAGE, "Option '--sector' requires an argument"),
    (["submit", "--nope"], USAGE, "No such option: --nope"),
    (["submit", "--kind", "porep-c2", *SECTOR, "--url", "ftp://host"], USAGE,
     "the scheme 'ftp' is not http or https"),
    (["submit", "--kind", "porep-c2", *SECTOR, "--url", "localhost:99999"], USAGE, "Port out of range"),
    (["submit", "--kind", "porep-c2", *SECTOR, "--url", NOWHERE], REFUSED,
     f"cannot reach the prooflane daemon at {NOWHERE}"),
    (["circuits", "register", "bad name!", "--zkey", "c.zkey"], USAGE,
     "NAME: expected 1-64 characters of A-Z a-z 0-9 . _ - starting with a letter or digit, not 'bad name!'"),
    (["circuits", "register", "x", "--zkey", "c.zkey", "--priority", "urgent"], USAGE,
     "--priority: expected 'critical', 'high' or 'normal', not 'urgent'"),
    (["circuits", "register", "x"], USAGE, "Missing option '--zkey'"),
    (["circuits", "register", "x", "--zkey", "c.zkey", "--on-daemon", "--url", NOWHERE], REFUSED,
     "cannot reach"),
    (["circuits", "register", "x", "--zkey", "c.zkey", "--url", NOWHERE], USAGE,
     "--zkey c.zkey: no such file on this machine (to name a file on the daemon's machine, add --on-daemon)"),
    (["submit", "--kind", "circom", "--circuit", "c", "--witness", "w.wtns", "--url", NOWHERE], USAGE,
     "--witness w.wtns: no such file on this machine"),
    (["submit", "--kind", "circom", "--circuit", "c", "--witness", "w.wtns", "--on-daemon", "--url", NOWHERE],
     REFUSED, "cannot reach"),
    (["circuits", "list", "--url", NOWHERE], REFUSED, "cannot reach"),
    (["status", "--url", "http://"], USAGE, "no host"),
    (["status", "--url", NOWHERE], REFUSED, "cannot reach"),
    (["bench", "--mix", "porep-c2=0"], USAGE, "the weight must be a whole number >= 1"),
    (["bench", "--jobs", "0"], USAGE, "'--jobs'"),
    (["bench", "--jobs", "many"], USAGE, "'--jobs'"),
    (["bench", "--url", "mailto:x"], USAGE, "'--url'"),
    (["bench", "--out", "/no/such/folder/b.json"], USAGE, "--out /no/such/folder/b.json: no folder"),
    (["demo", "--mix", ""], USAGE, "the mix is empty"),
    (["demo", "--port", "70000"], USAGE, "'--port'"),
    (["demo", "--data", __file__], USAGE, f"--data {__file__}: not a folder"),
    (["serve", "--profile", "huge"], USAGE, "expected one of tiny, small, medium"),
    (["sector", "new", "--out", "s1"], USAGE, "Missing option '--size'"),
    (["sector", "new", "--size", "100", "--out", "s1"], USAGE, "expected a power of two"),
    (["no-such-command"], USAGE, "No such command 'no-such-command'"),
    (["fleet"], USAGE, "Missing option '--config' (see 'prooflane fleet --help')"),
    (["fleet", "logs"], USAGE, "Missing argument 'NAME'"),
    (["fleet", "logs", "a", "--fleet", NOWHERE], REFUSED, f"cannot reach the fleet at {NOWHERE}"),
    (["fleet", "deploy", "a", "--ssh", "h", "--fleet", NOWHERE], REFUSED, "cannot reach the fleet"),
    (["fleet", "stop", "a", "--fleet", NOWHERE], REFUSED, "cannot reach the fleet"),
    (["fleet", "deploy", "a", "--pip-args", "'unclosed"], USAGE, "--pip-args: No closing quotation"),
    (["fleet", "deploy", "a", "--daemon-config", "/no/such.toml"], USAGE,
     "--daemon-config /no/such.toml: cannot read it"),
    (["service", "start", "--dir", "/no/such/folder"], REFUSED, "/no/such/folder/prooflane.toml"),
]  # fmt: skip


# The ids name the port-less NOWHERE, so that every collection of this file (one per test process) agrees.
IDS = [" ".join(w[0]).replace(NOWHERE, "NOWHERE")[:60] for w in WRONG]


@pytest.mark.parametrize(("args", "code", "says"), WRONG, ids=IDS)
def test_a_wrong_usage_is_one_line_that_says_what_to_do(
    args: list[str], code: int, says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # `sector new --out s1` and friends write nothing outside the test
    monkeypatch.delenv("PROOFLANE_URL", raising=False)
    result = runner.invoke(app, args)
    lines = result.stderr.splitlines()
    assert result.exit_code == code, result.output
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert says in lines[0]
    assert "Traceback" not in result.output
    assert result.stdout == ""


def test_a_wrong_usage_in_a_real_process_is_one_line_on_stderr() -> None:
    args = ["submit", "--kind", "porep-c2", "--sector", "s1", "--priority", "urgent", "--url", NOWHERE]
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == USAGE
    assert done.stderr.splitlines() == [
        "error: --priority: expected 'critical', 'high' or 'normal', not 'urgent'"
    ]
    assert done.stdout == ""


def test_a_bad_input_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "text.json").write_text("not json")
    (tmp_path / "numbers.json").write_text("[1, 2]")
    (tmp_path / "empty.json").write_text("[]")
    for name, says in (("text.json", "not valid JSON"), ("numbers.json", "expected an object"),
                       ("empty.json", "expected an object")):  # fmt: skip
        path = tmp_path / name
        args = ["submit", "--kind", "circom", "--circuit", "c", "--input", str(path), "--url", NOWHERE]
        result = runner.invoke(app, args)
        assert result.exit_code == USAGE, result.output
        assert result.stderr.splitlines() == [result.stderr.strip()]
        assert f"--input {path}: {says}" in result.stderr


COMMANDS = [
    ["serve"], ["submit"], ["status"], ["bench"], ["demo"], ["fleet"], ["setup"], ["export-vkey"],
    ["prove"], ["verify"], ["circuits"], ["circuits", "register"], ["circuits", "list"], ["sector"],
    ["sector", "new"], ["sector", "info"], ["fleet", "deploy"], ["fleet", "logs"], ["fleet", "stop"],
    ["fleet", "restart"], ["service"], ["service", "start"], ["service", "stop"], [],
]  # fmt: skip


@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c) or "prooflane" for c in COMMANDS])
def test_help_shows_values_never_python_types(command: list[str]) -> None:
    result = runner.invoke(app, [*command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage: prooflane" in result.stdout
    types = re.findall(r"<(?:str|bool|int|float|path|list\[[^\]]*\]|[a-z_]+)>", result.stdout)
    assert types == [], result.stdout
    assert "Traceback" not in result.output


def test_submit_help_names_what_each_option_takes() -> None:
    text = runner.invoke(app, ["submit", "--help"]).stdout
    for shown in ("--kind KIND", "--sector NAME|DIR", "--priority critical|high|normal", "--url URL",
                  "--job-id ID", "--input FILE", "--witness FILE", "--randomness HEX"):  # fmt: skip
        assert shown in text
    assert re.search(r"^\s+--wait\s+Wait", text, re.MULTILINE)
    assert re.search(r"^\s+--help\s+Show", text, re.MULTILINE)


@pytest.mark.parametrize(
    ("given", "url"),
    [
        ("http://10.0.0.5:9000", "http://10.0.0.5:9000"),
        ("https://prover.example/base/", "https://prover.example/base"),
        ("localhost:9822", "http://localhost:9822"),
        (":9822", "http://127.0.0.1:9822"),
        ("gpu-1", "http://gpu-1:9821"),
        ("[::1]:9822", "http://[::1]:9822"),
        ("  127.0.0.1:9822/ ", "http://127.0.0.1:9822"),
        ("http://gpu-1", "http://gpu-1"),  # a URL with a scheme keeps its own default port
    ],
)
def test_url_forms_are_normalised_in_one_place(given: str, url: str) -> None:
    assert normalize_url(given) == url
    with Client(given) as client:
        assert client.url == url


@pytest.mark.parametrize(
    ("given", "says"),
    [("ftp://x", "not http or https"), ("x:port", "Port could not be cast"), ("", "no host"),
     ("http://u:p@x:1", "no user"), ("x:1?q=1", "no user, query or fragment")],
)  # fmt: skip
def test_url_forms_that_cannot_be_a_daemon_say_what_is_accepted(given: str, says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)) as refused:
        normalize_url(given)
    assert "HOST:PORT" in str(refused.value)


def test_prooflane_url_in_the_environment_is_normalised_too() -> None:
    port = free_port()
    result = runner.invoke(app, ["status"], env={"PROOFLANE_URL": f":{port}"})
    assert result.exit_code == REFUSED
    assert f"cannot reach the prooflane daemon at http://127.0.0.1:{port}" in result.stderr
