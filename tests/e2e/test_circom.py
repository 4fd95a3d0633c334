"""Circom circuits compiled by circom2, on an engine with real processes: a .wasm and a .zkey of two
different circuits are refused at registration naming both wire counts, a .wtns of another circuit is
refused naming both counts, and a registered generator computes witnesses in its synthesis process's
witness helper (node, started once), failures included. Also bench_circom.py at its smallest size."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from prooflane.config import Config
from prooflane.engine.engine import Engine
from prooflane.errors import Conflict, Invalid
from prooflane.groth16 import read_r1cs, setup, write_zkey
from prooflane.models import JobRequest, JobState
from tests.support.groth16_samples import MUL_CIRCOM

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
WAIT = 120.0
# A second circuit, of more wires: out = a * b * c * d, each product checked.
CHAIN_CIRCOM = """pragma circom 2.0.0;
template Chain() {
    signal input a;
    signal input b;
    signal input c;
    signal input d;
    signal ab;
    signal abc;
    signal output out;
    ab <== a * b;
    abc <== ab * c;
    out <== abc * d;
}
component main = Chain();
"""


def compile_circom(folder: Path, name: str, source: str) -> dict[str, Any]:
    """``source`` compiled by circom2 to .r1cs and .wasm, with a development .zkey."""
    circom2 = ROOT / "node_modules" / ".bin" / "circom2"
    if not circom2.exists():
        pytest.fail("circom2 is not installed: run `make setup` (it runs `npm ci`)")
    (folder / f"{name}.circom").write_text(source)
    argv = [str(circom2), f"{name}.circom", "--r1cs", "--wasm", "-o", "."]
    subprocess.run(argv, check=True, capture_output=True, cwd=folder)
    r1cs = read_r1cs(folder / f"{name}.r1cs")
    write_zkey(folder / f"{name}.zkey", setup(r1cs, seed=name.encode()))
    return {
        "zkey": folder / f"{name}.zkey",
        "wasm": folder / f"{name}_js" / f"{name}.wasm",
        "wires": r1cs.n_wires,
    }


@pytest.fixture(scope="module")
def circuits(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """mul (4 wires) and chain (8 wires), compiled, and a .wtns of chain made by snarkjs."""
    folder = tmp_path_factory.mktemp("circom")
    out = {
        "mul": compile_circom(folder, "mul", MUL_CIRCOM),
        "chain": compile_circom(folder, "chain", CHAIN_CIRCOM),
    }
    (folder / "chain.json").write_text(json.dumps({"a": 2, "b": 3, "c": 5, "d": 7}))
    snarkjs = ROOT / "node_modules" / ".bin" / "snarkjs"
    argv = [
        str(snarkjs),
        "wtns",
        "calculate",
        str(out["chain"]["wasm"]),
        str(folder / "chain.json"),
        str(folder / "chain.wtns"),
    ]
    subprocess.run(argv, check=True, capture_output=True)
    out["chain"]["wtns"] = folder / "chain.wtns"
    return out


def config(tmp_path: Path, keys_dir: Path) -> Config:
    return Config(
        data_dir=tmp_path / "data",
        keys_dir=keys_dir,
        allowed_roots=(tmp_path.parent,),
        devices=("cpu",),
        synthesis_workers=1,
        live_retention_secs=600.0,
    )


async def test_a_wasm_and_a_key_of_two_circuits_are_refused_naming_both_counts(
    tmp_path: Path, keys_dir: Path, circuits: dict[str, dict[str, Any]]
) -> None:
    mul, chain = circuits["mul"], circuits["chain"]
    async with Engine(config(tmp_path, keys_dir)) as engine:
        with pytest.raises(Invalid) as refused:
            await engine.register_circuit("mul", mul["zkey"], wasm_path=chain["wasm"])
        said = str(refused.value)
        assert f"the .wasm computes {chain['wires']} wires, the key has {mul['wires']}" in said, said
        assert str(chain["wasm"]) in said
        assert engine.circuits() == []
        await engine.register_circuit("mul", mul["zkey"], wasm_path=mul["wasm"])
        with pytest.raises(Invalid) as refused:
            await engine.submit(JobRequest(kind="circom", circuit="mul", witnesses=[str(chain["wtns"])]))
        said = str(refused.value)
        assert f"this witness has {chain['wires']} wires, the circuit {mul['wires']}" in said, said


async def test_witnesses_come_from_the_helper_and_its_failures_name_the_partition(
    tmp_path: Path, keys_dir: Path, circuits: dict[str, dict[str, Any]]
) -> None:
    chain = circuits["chain"]
    async with Engine(config(tmp_path, keys_dir)) as engine:
        await engine.register_circuit("chain", chain["zkey"], wasm_path=chain["wasm"])
        inputs: list[str | dict[str, Any]] = [{"a": n, "b": n + 1, "c": 3, "d": 4} for n in range(1, 5)]
        job_id = await engine.submit(JobRequest(kind="circom", circuit="chain", witnesses=inputs))
        proof = await engine.wait_proof(job_id, WAIT)
        assert proof is not None and len(proof.partitions) == 4
        assert [int(p.public[0]) for p in proof.partitions] == [n * (n + 1) * 12 for n in range(1, 5)]
        bad: list[str | dict[str, Any]] = [{"a": 1, "b": 1, "c": 1, "d": 1}, {"a": 1, "b": 2}]
        failing = await engine.submit(JobRequest(kind="circom", circuit="chain", witnesses=bad))
        with pytest.raises(Conflict):
            await engine.wait_proof(failing, WAIT)
        view = engine.job(failing)
        assert view is not None and view.state is JobState.FAILED
        assert (
            view.error is not None
            and "partition 1 failed: synthesis failed: witness generation failed" in view.error
        )
        assert "input" in view.error, view.error  # the generator's own words: an input is missing


@pytest.mark.timeout(600)
def test_bench_circom_runs_at_its_smallest_size_and_writes_its_results(tmp_path: Path) -> None:
    env = os.environ | {"PROOFLANE_BENCH_RESULTS": str(tmp_path)}
    argv = [
        sys.executable,
        str(ROOT / "benchmarks" / "bench_circom.py"),
        "--bits",
        "16",
        "--jobs",
        "2",
        "--layouts",
        "before,default",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=540, cwd=tmp_path)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    written = json.loads((tmp_path / "bench_circom.json").read_text())
    assert [row["layout"] for row in written["rows"]] == ["before", "default"]
    assert all(row["failed"] == 0 and row["partitions"] == 2 for row in written["rows"])
    assert f"wrote {tmp_path / 'bench_circom.json'}" in done.stdout
