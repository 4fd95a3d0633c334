"""`prooflane prove` short of memory: one line naming the stage and the key's size, exit code 3 (1 means an
invalid proof, 2 bad input), never a traceback. A real process whose address space is capped, once proving's
modules are loaded, a few MiB above what it holds: reading a key larger than that must fail."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from prooflane.groth16 import BN128, setup, write_wtns, write_zkey
from tests.support.groth16_samples import square_chain

CAPPED = """
import resource, sys
from prooflane.cli import main
import numpy, prooflane.cli.proof, prooflane.groth16, prooflane.groth16.arithmetic  # loaded before the cap
pages = int(open("/proc/self/statm").read().split()[0])
resource.setrlimit(resource.RLIMIT_AS, (pages * resource.getpagesize() + (4 << 20), resource.RLIM_INFINITY))
main()
"""


def test_a_prove_out_of_memory_is_one_line_and_exit_code_3(tmp_path: Path) -> None:
    r1cs, witness = square_chain(BN128, 1 << 14)
    write_zkey(tmp_path / "k.zkey", setup(r1cs, seed=b"memory"))
    write_wtns(tmp_path / "w.wtns", witness)
    assert (tmp_path / "k.zkey").stat().st_size > 8 << 20  # twice the room left
    outputs = ["--proof", str(tmp_path / "p.json"), "--public", str(tmp_path / "pub.json"), "--threads", "1"]
    done = subprocess.run(
        [sys.executable, "-c", CAPPED, "prove", str(tmp_path / "k.zkey"), str(tmp_path / "w.wtns"), *outputs],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    line = done.stderr.strip()
    assert line.startswith("error: out of memory (stage: reading the key); the key ") and " MiB" in line, line
    assert not (tmp_path / "p.json").exists()
