"""``prooflane setup / export-vkey / prove / verify``: files in, files out, exit codes 0/1/2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from prooflane.cli import proof as _cli_proof
from prooflane.cli.entry import app
from prooflane.groth16 import BLS12381, BN128, Curve, arithmetics, write_r1cs, write_wtns
from prooflane.groth16.arithmetic import arithmetic
from tests.support.groth16_samples import square_chain

CURVES = [pytest.param(BN128, id="bn128"), pytest.param(BLS12381, id="bls12381")]


def invoke(*args: str | Path) -> Result:
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output
    return result


def _circuit(folder: Path, curve: Curve = BN128, n: int = 6) -> tuple[Path, Path]:
    r1cs, witness = square_chain(curve, n)
    write_r1cs(folder / "c.r1cs", r1cs)
    write_wtns(folder / "w.wtns", witness)
    return folder / "c.r1cs", folder / "w.wtns"


def _outputs(folder: Path) -> tuple[str, Path, str, Path]:
    return ("--proof", folder / "out-proof.json", "--public", folder / "out-public.json")


def _prove(folder: Path, curve: Curve = BN128) -> dict[str, Path]:
    r1cs, wtns = _circuit(folder, curve)
    paths = {n: folder / n for n in ("k.zkey", "vk.json", "proof.json", "public.json")}
    assert invoke("setup", r1cs, "--zkey", paths["k.zkey"], "--seed", "cli").exit_code == 0
    assert invoke("export-vkey", paths["k.zkey"], "--out", paths["vk.json"]).exit_code == 0
    done = invoke(
        "prove", paths["k.zkey"], wtns, "--proof", paths["proof.json"], "--public", paths["public.json"],
        "--processes", "1",
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    return {**paths, "wtns": wtns, "r1cs": r1cs}


@pytest.mark.parametrize("curve", CURVES)
def test_setup_prove_verify_round_trip(tmp_path: Path, curve: Curve) -> None:
    p = _prove(tmp_path, curve)
    assert json.loads(p["vk.json"].read_text())["curve"] == curve.name
    done = invoke("verify", p["vk.json"], p["public.json"], p["proof.json"])
    assert done.exit_code == 0 and "valid" in done.output


def test_setup_warns_that_the_key_is_unsafe(tmp_path: Path) -> None:
    r1cs, _ = _circuit(tmp_path)
    done = invoke("setup", r1cs, "--zkey", tmp_path / "k.zkey")
    assert done.exit_code == 0 and "UNSAFE" in done.output


def test_a_tampered_public_input_exits_1(tmp_path: Path) -> None:
    p = _prove(tmp_path)
    public = json.loads(p["public.json"].read_text())
    p["public.json"].write_text(json.dumps([public[0], str(int(public[1]) + 1)]))
    done = invoke("verify", p["vk.json"], p["public.json"], p["proof.json"])
    assert done.exit_code == 1 and "INVALID" in done.output


def test_bad_json_exits_2_naming_the_file(tmp_path: Path) -> None:
    p = _prove(tmp_path)
    p["proof.json"].write_text("{not json")
    done = invoke("verify", p["vk.json"], p["public.json"], p["proof.json"])
    assert done.exit_code == 2 and "proof.json: not valid JSON" in done.output


def test_wrong_magic_exits_2_naming_the_file(tmp_path: Path) -> None:
    r1cs, wtns = _circuit(tmp_path)
    done = invoke("prove", r1cs, wtns, "--proof", tmp_path / "p.json", "--public", tmp_path / "q.json")
    assert done.exit_code == 2 and "c.r1cs: wrong magic" in done.output


def test_truncated_key_exits_2(tmp_path: Path) -> None:
    p = _prove(tmp_path)
    data = p["k.zkey"].read_bytes()
    p["k.zkey"].write_bytes(data[: len(data) // 2])
    done = invoke("export-vkey", p["k.zkey"], "--out", tmp_path / "x.json")
    assert done.exit_code == 2 and "k.zkey: truncated" in done.output


def test_witness_length_mismatch_exits_2(tmp_path: Path) -> None:
    p = _prove(tmp_path)
    write_wtns(tmp_path / "long.wtns", square_chain(BN128, 9)[1])
    done = invoke(
        "prove", p["k.zkey"], tmp_path / "long.wtns", "--proof", tmp_path / "x", "--public", tmp_path / "y"
    )
    assert done.exit_code == 2 and "long.wtns: 13 values" in done.output


def test_curve_mismatch_exits_2(tmp_path: Path) -> None:
    p = _prove(tmp_path)
    done = invoke("setup", p["r1cs"], "--zkey", tmp_path / "x.zkey", "--curve", "bls12381")
    assert done.exit_code == 2 and "c.r1cs: the circuit is over bn128" in done.output
    write_wtns(tmp_path / "bls.wtns", square_chain(BLS12381, 6)[1])
    done = invoke(
        "prove", p["k.zkey"], tmp_path / "bls.wtns", "--proof", tmp_path / "x", "--public", tmp_path / "y"
    )
    assert done.exit_code == 2 and "bls.wtns: the witness is over bls12381" in done.output
    (tmp_path / "bls").mkdir()
    other = _prove(tmp_path / "bls", BLS12381)
    done = invoke("verify", other["vk.json"], p["public.json"], p["proof.json"])
    assert done.exit_code == 2 and "proof.json" in done.output


def test_wrong_number_of_public_signals_exits_2(tmp_path: Path) -> None:
    p = _prove(tmp_path)
    p["public.json"].write_text(json.dumps(json.loads(p["public.json"].read_text())[:1]))
    done = invoke("verify", p["vk.json"], p["public.json"], p["proof.json"])
    assert done.exit_code == 2 and "public.json: 1 public signals" in done.output


def test_prove_json_prints_the_timings_of_each_stage(tmp_path: Path) -> None:
    p = _prove(tmp_path)
    done = invoke("prove", p["k.zkey"], p["wtns"], *_outputs(tmp_path), "--processes", "1", "--json")
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert report["curve"] == "bn128" and report["threads"] == 1
    assert report["arithmetic"] == arithmetics()["bn128"]
    said = arithmetic(BN128)  # what runs, read live: the same in this process (same CPU, same environment)
    assert (report["products"], report["kernels"]) == (said.products(), said.kernels())
    timings = report["timings_s"]
    assert set(timings) >= {
        "reading the key",
        "reading the witness",
        "synthesis",
        "MSMs",
        "assembly",
        "total",
    }
    assert timings["total"] >= sum(v for k, v in timings.items() if k != "total") - 1e-3
    assert json.loads((tmp_path / "out-proof.json").read_text())["protocol"] == "groth16"


def test_prove_shows_its_stages_on_stderr_once_it_runs_long(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = _prove(tmp_path)
    quiet = invoke("prove", p["k.zkey"], p["wtns"], *_outputs(tmp_path), "--processes", "1")
    assert quiet.exit_code == 0 and quiet.stderr == ""  # a tiny key proves well within a second
    monkeypatch.setattr(_cli_proof, "PROGRESS_AFTER_S", 0.0)
    shown = invoke("prove", p["k.zkey"], p["wtns"], *_outputs(tmp_path), "--processes", "1")
    assert shown.exit_code == 0, shown.output
    lines = shown.stderr.splitlines()
    names = [line.split(" s  ", 1)[1] for line in lines]
    assert names[-3:] == ["assembly", "writing the proof", "done"] and len(set(names)) == len(names)
    assert any("synthesis" in line for line in lines) and shown.stdout.startswith("wrote ")


def test_proof_commands_start_without_the_daemons_modules(tmp_path: Path) -> None:
    """`prooflane prove` is timed as a whole process: it loads only the proving commands."""
    import subprocess
    import sys

    probe = (
        "import sys; from prooflane.cli import main\n"
        "sys.argv = ['prooflane', *sys.argv[1:]]\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    code = exc.code\n"
        "print(code, sorted(m for m in ('prooflane.client', 'prooflane.models', 'httpx', 'rich.progress') "
        "if m in sys.modules))"
    )
    r1cs, _ = _circuit(tmp_path)
    zkey = tmp_path / "k.zkey"
    setup_run = [sys.executable, "-c", probe, "setup", str(r1cs), "--zkey", str(zkey), "--seed", "lean"]
    assert subprocess.run(setup_run, capture_output=True, text=True, check=True).stdout.endswith("0 []\n")
    assert zkey.exists()
    full = subprocess.run([sys.executable, "-c", probe, "--help"], capture_output=True, text=True, check=True)
    assert "serve" in full.stdout and "prove" in full.stdout  # every command is listed
    assert "'prooflane.client'" in full.stdout.splitlines()[-1]


def test_prove_json_names_the_libraries_when_the_c_extension_is_turned_off(tmp_path: Path) -> None:
    p = _prove(tmp_path, BLS12381)
    run = [sys.executable, "-c", "from prooflane.cli import main; main()"]
    args = ["prove", str(p["k.zkey"]), str(p["wtns"]), *map(str, _outputs(tmp_path)), "--json"]
    env = dict(os.environ, PROOFLANE_NATIVE="0")  # read once, when the process chooses its arithmetic
    done = subprocess.run([*run, *args], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["curve"], report["arithmetic"]) == ("bls12381", "libraries: PROOFLANE_NATIVE=0")
    assert (report["products"], report["kernels"]) == ("libraries", [])
