"""The witness helper: circom witnesses computed by snarkjs's witness calculator in one node process per
synthesis process, kept between witnesses; ``snarkjs wtns calculate`` when that process cannot run."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

__all__ = ["generate_wtns"]


def generate_wtns(values: dict[str, Any], wasm: str | None, folder: str) -> str:
    """Write the witness of circuit inputs ``values`` by the generator ``wasm`` into ``folder``; its path
    (ValueError saying why not: no generator, no node or snarkjs, or the generator refused the inputs)."""
    if wasm is None:
        raise ValueError("circuit inputs were given but the circuit has no witness generator (.wasm)")
    out = os.path.join(folder, "witness.wtns")
    try:
        _HELPER.calculate(wasm, values, out)
    except _HelperEnded:
        _calculate_by_cli(wasm, values, folder, out)  # the CLI says why node cannot run it, if it cannot
    return out


def _calculate_by_cli(wasm: str, values: dict[str, Any], folder: str, out: str) -> None:
    inputs = os.path.join(folder, "input.json")
    Path(inputs).write_text(json.dumps(values))
    done = subprocess.run(
        [_snarkjs(), "wtns", "calculate", wasm, inputs, out], capture_output=True, text=True
    )
    if done.returncode != 0:
        # snarkjs prints the failed assertion on stdout and only a summary on stderr: keep both; the status
        # tracker shortens reasons for display, the journal keeps them whole.
        output = "\n".join(part for part in (done.stderr.strip(), done.stdout.strip()) if part)
        raise ValueError(f"witness generation failed: {output}")


# The witness helper: one node process per synthesis process, kept, that runs snarkjs's witness calculator
# (the same code as `snarkjs wtns calculate`) on each request. Starting node and loading snarkjs took most
# of a witness's time when each witness started its own `snarkjs wtns calculate` (docs/engine.md, "Circom
# circuits"). One request at a time, one JSON line each way; stdin's end (its synthesis process ended, even
# killed) ends it.
_HELPER_JS = r"""
const snarkjs = require(process.argv[1]);
const lines = require("readline").createInterface({ input: process.stdin });
let queue = Promise.resolve();
lines.on("line", (line) => {
  queue = queue.then(async () => {
    let answer;
    try {
      const request = JSON.parse(line);
      await snarkjs.wtns.calculate(request.input, request.wasm, request.out);
      answer = { ok: true };
    } catch (err) {
      answer = { error: String((err && err.message) || err) };
    }
    process.stdout.write(JSON.stringify(answer) + "\n");
  });
});
lines.on("close", () => queue.then(() => process.exit(0)));
"""


class _HelperEnded(Exception):
    """Raised when the witness helper gave no answer: it could not start, or it ended."""


class _WitnessHelper:
    """This synthesis process's witness helper (started on first use, started again after it ended)."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[str] | None = None

    def calculate(self, wasm: str, values: dict[str, Any], out: str) -> None:
        """Write the witness of ``values`` by the generator ``wasm`` to ``out``; ValueError saying why not."""
        process = self._started()
        assert process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(json.dumps({"wasm": wasm, "input": values, "out": out}) + "\n")
            process.stdin.flush()
            line = process.stdout.readline()
        except OSError:
            line = ""
        if not line:
            raise _HelperEnded(f"the witness helper ended (exit status {self.stop()})")
        answer = json.loads(line)
        if "error" in answer:
            raise ValueError(f"witness generation failed: {answer['error']}")

    def stop(self) -> int | None:
        """End the helper (its stdin closed, then killed if it lingers); its exit status."""
        process, self._process = self._process, None
        if process is None:
            return None
        with contextlib.suppress(OSError):
            assert process.stdin is not None
            process.stdin.close()
        try:
            return process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            return process.wait()

    def _started(self) -> subprocess.Popen[str]:
        if self._process is not None and self._process.poll() is None:
            return self._process
        node = shutil.which("node")
        if node is None:
            raise _HelperEnded("no node on PATH")
        package = Path(os.path.realpath(_snarkjs())).parents[1]  # <package>/build/cli.cjs
        self._process = subprocess.Popen(
            [node, "-e", _HELPER_JS, str(package)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        return self._process


_HELPER = _WitnessHelper()


def _snarkjs() -> str:
    """snarkjs on PATH, else the one `make` installs in the source tree's node_modules."""
    found = shutil.which("snarkjs")
    if found:
        return found
    for root in (Path(__file__).resolve().parents[3], Path.cwd()):
        candidate = root / "node_modules" / ".bin" / "snarkjs"
        if candidate.exists():
            return str(candidate)
    raise ValueError("witness generation needs snarkjs: put it on PATH (npm install snarkjs) or run `make`")
