"""Fixed-base tables stored on disk (``_tablecache``): built once, mapped by the processes that prove with
them, rebuilt when a file is wrong, pruned beyond the folder's limit."""

from __future__ import annotations

import fcntl
import mmap
import threading
from pathlib import Path

import pytest

from prooflane.groth16 import BLS12381, BN128, Curve, prove, release, setup, verify
from prooflane.groth16 import _tablecache as cache
from prooflane.groth16.arithmetic import Arithmetic, ExtensionArithmetic
from prooflane.groth16.prover import BASES, base_section, key_table_bytes, preload, tabulated
from prooflane.groth16.zkey import ProvingKey
from tests.support.groth16_samples import square_chain

CURVES = [pytest.param(BN128, id="bn128"), pytest.param(BLS12381, id="bls12381")]


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, native: None) -> Path:
    """A tables folder of this test's own, on the C extension (the libraries build no tables)."""
    where = tmp_path / "msm-tables"
    monkeypatch.setenv(cache.ENV, str(where))
    monkeypatch.delenv(cache.MAX_BYTES_ENV, raising=False)
    return where


def _key(curve: Curve = BN128, n: int = 300, seed: bytes = b"stored tables") -> ProvingKey:
    key = setup(square_chain(curve, n)[0], seed=seed)
    release(key)
    return key


def _builds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Counts ``tabulate``'s builds (one entry a section) from now on."""
    built: list[str] = []
    original = ExtensionArithmetic.tabulate

    def counting(self: Arithmetic, section: object, threads: int) -> object:
        built.append("built")
        return original(self, section, threads)  # type: ignore[arg-type]

    monkeypatch.setattr(ExtensionArithmetic, "tabulate", counting)
    return built


@pytest.mark.parametrize("curve", CURVES)
def test_tables_are_built_once_stored_and_mapped_by_a_later_process(
    curve: Curve, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    r1cs, witness = square_chain(curve, 300)
    key = setup(r1cs, seed=b"stored")
    release(key)
    plain = prove(key, witness, randomness=(3, 4), tables=False)
    assert tabulated(key) == ()
    builds = _builds(monkeypatch)
    release(key)
    built = prove(key, witness, randomness=(3, 4), tables=True)
    files = sorted(folder.glob("*.tables"))
    assert len(builds) == len(BASES) == len(files)
    assert sum(f.stat().st_size for f in files) == key_table_bytes(
        curve, key.n_vars, key.n_public, key.domain_size
    )
    assert all(f.name.startswith(key.digest) for f in files)
    release(key)  # as a fresh process: the default maps what is stored, builds nothing
    mapped = prove(key, witness, randomness=(3, 4))
    assert len(builds) == len(BASES) and tabulated(key) == tabulated(key, stored=True) == BASES
    assert all(isinstance(base_section(curve, key.digest, n, None).tables.data, mmap.mmap) for n in BASES)  # type: ignore[union-attr]
    assert plain == built == mapped and verify(key.verification_key, mapped.public, mapped)


def test_a_wrong_stored_file_is_never_used_and_is_rebuilt(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file of the right size whose rows are not the key's (spot-checked), or of the wrong size, is
    ignored by a plain load and replaced by a build."""
    key = _key()
    preload(key, tables=True)
    release(key)
    files = sorted(folder.glob("*.tables"))
    good = {f: f.read_bytes() for f in files}
    files[0].write_bytes(b"\xff" * len(good[files[0]]))  # no row of a key is all ones
    files[1].write_bytes(good[files[1]][:-1])  # truncated
    preload(key, tables=None)
    wrong = {f.name.split(".")[1] for f in files[:2]}
    assert set(tabulated(key)) == set(BASES) - wrong
    release(key)
    builds = _builds(monkeypatch)
    preload(key, tables=True)
    assert len(builds) == 2 and tabulated(key) == BASES
    assert {f: f.read_bytes() for f in files} == good


def test_an_empty_folder_setting_keeps_the_tables_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, native: None
) -> None:
    monkeypatch.setenv(cache.ENV, "")
    key = _key()
    preload(key, tables=True)
    assert tabulated(key) == BASES and tabulated(key, stored=True) == ()
    assert cache.not_storable() == f"${cache.ENV} is set empty: no tables are stored"
    assert all(isinstance(base_section(BN128, key.digest, n, None).tables.data, bytes) for n in BASES)  # type: ignore[union-attr]
    release(key)
    preload(key, tables=None)  # nothing stored: nothing to map
    assert tabulated(key) == ()


def test_a_folder_that_cannot_be_written_builds_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, native: None
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(cache.ENV, str(blocker / "msm-tables"))
    key = _key()
    preload(key, tables=True)
    assert tabulated(key) == BASES and tabulated(key, stored=True) == ()
    assert cache.not_storable() == f"they cannot be stored in {blocker / 'msm-tables'} (Not a directory)"


def test_storing_beyond_the_limit_removes_the_least_recently_used(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = _key(seed=b"first"), _key(seed=b"second")
    preload(first, tables=True)
    one_key = sum(f.stat().st_size for f in folder.glob("*.tables"))
    monkeypatch.setenv(cache.MAX_BYTES_ENV, str(one_key))
    preload(second, tables=True)
    left = {f.name.split(".")[0] for f in folder.glob("*.tables")}
    assert left == {second.digest}
    assert tabulated(first) == BASES  # what a process has mapped stays mapped
    release(first)
    preload(first, tables=None)
    assert tabulated(first) == ()


def test_a_build_waits_for_another_process_building_the_same_tables(
    folder: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """While another process holds a file's lock, a build waits, then maps what that process stored."""
    key = _key()
    monkeypatch.setenv(cache.ENV, str(tmp_path / "elsewhere"))
    preload(key, tables=True, parts=("h",))  # the other process's build, made beforehand
    release(key)
    made = next((tmp_path / "elsewhere").glob("*.tables"))
    monkeypatch.setenv(cache.ENV, str(folder))
    folder.mkdir()
    with (folder / (made.name + ".lock")).open("a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        builds = _builds(monkeypatch)
        waiting = threading.Thread(target=preload, args=(key, ("h",)), kwargs={"tables": True})
        waiting.start()
        waiting.join(0.5)
        assert waiting.is_alive()  # held by the lock, not building
        made.replace(folder / made.name)
        fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    waiting.join(60)
    assert not waiting.is_alive() and builds == [] and tabulated(key) == ("h",)


def test_prove_json_says_which_sections_ran_over_tables(folder: Path) -> None:
    """``prooflane prove --msm-tables`` builds and stores them; a later plain run finds them; the JSON report
    names the sections that used them."""
    import json

    from typer.testing import CliRunner

    from prooflane.cli.entry import app
    from prooflane.groth16 import read_zkey, write_r1cs, write_wtns

    r1cs, witness = square_chain(BN128, 40)
    write_r1cs(folder.parent / "c.r1cs", r1cs)
    write_wtns(folder.parent / "w.wtns", witness)
    zkey = folder.parent / "k.zkey"

    def run(*extra: str) -> dict[str, object]:
        outputs = ["--proof", str(folder.parent / "p.json"), "--public", str(folder.parent / "q.json")]
        done = CliRunner().invoke(
            app, ["prove", str(zkey), str(folder.parent / "w.wtns"), *outputs, "--json", *extra]
        )
        assert done.exit_code == 0, done.output
        return json.loads(done.stdout)  # type: ignore[no-any-return]

    assert (
        CliRunner().invoke(app, ["setup", str(folder.parent / "c.r1cs"), "--zkey", str(zkey)]).exit_code == 0
    )
    assert run()["msm_tables"] == []
    release(read_zkey(zkey))  # the CLI's sections stay in this process: dropped between runs
    assert run("--msm-tables")["msm_tables"] == list(BASES)
    release(read_zkey(zkey))
    assert run()["msm_tables"] == list(BASES)


def test_the_libraries_store_no_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, library_only: None
) -> None:
    monkeypatch.setenv(cache.ENV, str(tmp_path / "msm-tables"))
    key = _key(n=20)
    preload(key, tables=True)
    assert tabulated(key) == () and not (tmp_path / "msm-tables").exists()
