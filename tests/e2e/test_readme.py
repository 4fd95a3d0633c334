"""README.md's command blocks, run as a new user would on a fresh clone: read from README.md itself (so they
cannot drift), in the order they appear, in one empty folder, with `prooflane` of this checkout's venv and
node_modules/.bin on PATH (as the README's setup says).

What is changed, and only that: the data folder `/var/lib/prooflane` is a temporary one; the daemon listens
on a free port instead of 9821 (`--port 0` is added to `prooflane serve`), so the client blocks get its URL in
$PROOFLANE_URL and the Python block in place of `http://127.0.0.1:9821`. `make demo` and `make test` are not
run (the one runs until Ctrl-C, the other is this test suite); the fleet's TOML block is read as TOML.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from prooflane.cli.daemon_process import READY_PREFIX
from prooflane.config import DEFAULT_URL
from tests.support.daemons import TIMEOUT, seed_keys
from tests.support.paths import NODE_BIN, ROOT

pytestmark = [pytest.mark.timeout(900)]
README = ROOT / "README.md"
DATA = "/var/lib/prooflane"
NOT_RUN = ("make demo", "make test")  # first words of the blocks not run (see the docstring)


@dataclass(frozen=True)
class Block:
    """One fenced block of the README: its info string (``python``, ``toml`` or empty) and its text."""

    info: str
    text: str
    line: int

    @property
    def serves(self) -> bool:
        return self.text.lstrip().startswith("prooflane serve")


def blocks() -> list[Block]:
    """Every fenced block of README.md, in order."""
    found, lines = [], README.read_text().splitlines()
    opened: tuple[str, int] | None = None
    body: list[str] = []
    for number, line in enumerate(lines, 1):
        fence = re.fullmatch(r"```(\w*)\s*", line)
        if fence and opened is None:
            opened, body = (fence.group(1), number), []
        elif line.strip() == "```" and opened is not None:
            found.append(Block(opened[0], "\n".join(body) + "\n", opened[1]))
            opened = None
        elif opened is not None:
            body.append(line)
    assert opened is None, f"README.md:{opened[1]}: a block is never closed"
    return found


@pytest.fixture
def env() -> dict[str, str]:
    """The environment the README's setup gives: the venv's `prooflane`, circom2 and snarkjs on PATH."""
    venv_bin = Path(sys.executable).parent
    assert (venv_bin / "prooflane").exists(), "prooflane is not installed in this interpreter's venv"
    assert (NODE_BIN / "circom2").exists() and (NODE_BIN / "snarkjs").exists(), "run `make test` (npm ci)"
    path = os.pathsep.join([str(venv_bin), str(NODE_BIN), os.environ.get("PATH", "")])
    return dict(os.environ, PATH=path, PYTHONUNBUFFERED="1")


@contextlib.contextmanager
def serving(block: Block, data: Path, cwd: Path, env: dict[str, str]) -> Iterator[str]:
    """Run the serve block (on a free port, the data folder ``data``) until the block ends; its URL."""
    command = block.text.strip().replace("prooflane serve", "prooflane serve --port 0", 1)
    command = command.replace(DATA, str(data))
    log = (cwd.parent / "daemon.log").open("w")
    process = subprocess.Popen(
        ["bash", "-c", f"exec {command}"], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=log,
        text=True, start_new_session=True,
    )  # fmt: skip
    assert process.stdout is not None
    try:
        url = ""
        for line in process.stdout:
            if line.startswith(READY_PREFIX):
                url = line.removeprefix(READY_PREFIX).strip()
                break
        assert url, f"`{command}` ended before it listened: {(cwd.parent / 'daemon.log').read_text()}"
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(TIMEOUT)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.stdout.close()
            log.close()
    assert process.returncode == 0, (cwd.parent / "daemon.log").read_text()


def run_block(block: Block, cwd: Path, env: dict[str, str], data: Path, url: str | None) -> str:
    """Run a shell or Python block as written (but for the data folder and the URL); its output."""
    text = block.text.replace(DATA, str(data))
    if block.info == "python":
        text = text.replace(DEFAULT_URL, url or DEFAULT_URL)
        argv = [sys.executable, "-c", text]
    else:
        argv = ["bash", "-e", "-o", "pipefail", "-c", text]
    block_env = dict(env, PROOFLANE_URL=url) if url else env
    done = subprocess.run(
        argv, cwd=cwd, env=block_env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, f"README.md:{block.line}:\n{block.text}\n{done.stdout}\n{done.stderr}"
    assert "Traceback" not in done.stderr
    return done.stdout


def test_every_block_is_run_or_said_why_not() -> None:
    found = blocks()
    assert sum(b.serves for b in found) == 1, "one block starts the daemon"
    skipped = [b for b in found if b.text.lstrip().startswith(NOT_RUN)]
    assert [b.text.splitlines()[0].split("#")[0].strip() for b in skipped] == ["make demo"]
    assert "make test" in skipped[0].text
    assert {b.info for b in found} <= {"", "python", "toml"}
    for block in found:
        if block.info == "toml":
            tomllib.loads(block.text)  # the fleet config as the README gives it is TOML


def test_the_readme_works_as_written(tmp_path_factory: pytest.TempPathFactory, env: dict[str, str]) -> None:
    root = tmp_path_factory.mktemp("readme")
    cwd, data = root / "work", root / "data"
    cwd.mkdir()
    seed_keys(tmp_path_factory, data)  # the dev keys an earlier daemon of the session made, if any
    outputs: dict[int, str] = {}
    with contextlib.ExitStack() as stack:
        url: str | None = None
        for block in blocks():
            if block.info == "toml" or block.text.lstrip().startswith(NOT_RUN):
                continue
            if block.serves:
                url = stack.enter_context(serving(block, data, cwd, env))
                continue
            outputs[block.line] = run_block(block, cwd, env, data, url)
    said = "\n".join(outputs.values())
    assert "OK: the proof is valid" in said  # Proving core
    assert '"kind": "porep-c2"' in said  # the quick start's submit --wait
    assert "partition proofs" in said  # bench
    assert '"33"' in said and '"35"' in said  # bring your own circuit: two partitions
    assert " proven" in said  # the Python client
    assert (data / "sectors" / "s1" / "meta.json").exists()
