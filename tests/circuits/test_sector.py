"""Sector folders: creation, determinism, validation, and `prooflane sector new`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prooflane.circuits import MerkleTree, Sector, poseidon
from prooflane.cli.entry import app
from prooflane.errors import SectorError
from prooflane.groth16 import BLS12381, BN128


def test_create_writes_data_trees_and_meta(tmp_path: Path) -> None:
    sector = Sector.create(tmp_path / "s", 256, seed="one", sector_id=7)
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == [
        "data.bin",
        "meta.json",
        "tree-bn128-d.bin",
        "tree-bn128-r.bin",
        "tree-bn128-u.bin",
    ]
    meta = json.loads((tmp_path / "s" / "meta.json").read_text())
    assert meta["sector_id"] == 7 and meta["size_bytes"] == 256 and meta["leaf_count"] == 8
    assert meta["roots"]["bn128"]["comm_d"] == str(sector.comm_d)
    data = sector.data_leaves()
    assert sector.comm_d == MerkleTree.build(data).root
    replica = [(d + poseidon([sector.replica_id, i])) % BN128.r for i, d in enumerate(data)]
    assert sector.comm_r == MerkleTree.build(replica).root
    update = [(d + poseidon([sector.update_key, i])) % BN128.r for i, d in enumerate(data)]
    assert sector.comm_r_update == MerkleTree.build(update).root


def test_same_seed_same_sector(tmp_path: Path) -> None:
    a = Sector.create(tmp_path / "a", 128, seed=b"seed")
    b = Sector.create(tmp_path / "b", 128, seed=b"seed")
    c = Sector.create(tmp_path / "c", 128, seed=b"other")
    assert (a.sector_id, a.comm_d, a.comm_r) == (b.sector_id, b.comm_d, b.comm_r)
    assert a.comm_d != c.comm_d


def test_open_reads_what_create_wrote(tmp_path: Path) -> None:
    made = Sector.create(tmp_path / "s", 128, seed=1)
    opened = Sector.open(tmp_path / "s")
    assert (opened.sector_id, opened.comm_d, opened.comm_r, opened.comm_r_update) == (
        made.sector_id,
        made.comm_d,
        made.comm_r,
        made.comm_r_update,
    )
    assert opened.tree("r").path(3) == made.tree("r").path(3)


def test_other_curve_trees_are_built_on_demand(tmp_path: Path) -> None:
    Sector.create(tmp_path / "s", 128, seed=1)
    sector = Sector.open(tmp_path / "s")
    roots = sector.roots(BLS12381)
    assert roots.comm_d == MerkleTree.build(sector.data_leaves(), BLS12381).root
    assert (tmp_path / "s" / "tree-bls12381-r.bin").exists()
    assert Sector.open(tmp_path / "s").roots(BLS12381) == roots


@pytest.mark.parametrize("size", [0, 32, 100, 96])
def test_sizes_must_be_powers_of_two(tmp_path: Path, size: int) -> None:
    with pytest.raises(SectorError, match="power of two"):
        Sector.create(tmp_path / "s", size)


def test_bad_folders_are_named(tmp_path: Path) -> None:
    with pytest.raises(SectorError, match="no such file"):
        Sector.open(tmp_path)
    Sector.create(tmp_path / "s", 64, seed=1)
    with pytest.raises(SectorError, match="already exists"):
        Sector.create(tmp_path / "s", 64, seed=1)
    meta_path = tmp_path / "s" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "size_bytes": 65}))
    with pytest.raises(SectorError, match="size_bytes"):
        Sector.open(tmp_path / "s")
    meta_path.write_text("{not json")
    with pytest.raises(SectorError, match="JSON"):
        Sector.open(tmp_path / "s")
    meta_path.write_text(json.dumps(meta))
    (tmp_path / "s" / "data.bin").write_bytes(b"\xff" * 64)
    with pytest.raises(SectorError, match="leaf 0 is not below"):
        Sector.open(tmp_path / "s")
    (tmp_path / "s" / "data.bin").write_bytes(b"\x00" * 32)
    with pytest.raises(SectorError, match="32 bytes"):
        Sector.open(tmp_path / "s")


def test_cli_sector_new_prints_the_roots(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["sector", "new", "--size", "256", "--out", str(tmp_path / "s"), "--seed", "x"]
    )
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    sector = Sector.open(tmp_path / "s")
    assert printed["comm_r"] == str(sector.comm_r) and printed["leaf_count"] == 8
    info = CliRunner().invoke(app, ["sector", "info", str(tmp_path / "s")])
    assert info.exit_code == 0 and json.loads(info.stdout)["comm_d"] == str(sector.comm_d)


def test_cli_bad_size_exits_2_with_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["sector", "new", "--size", "100", "--out", str(tmp_path / "s")])
    assert result.exit_code == 2
    assert "power of two" in result.output and "Traceback" not in result.output


def test_unwritable_places_are_named(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(SectorError, match="cannot make the sector folder"):
        Sector.create(tmp_path / "file" / "s", 64, seed=1)
