"""Bad input: the files a request names are confined to the allowed roots and must be regular files of a
sane size, refused with a 4xx that names the file and the problem, never waited on and never read whole;
heavy checks run off the event loop; a pool process that dies during a request costs only that request.

The file rules are checked on their own (`prooflane.files`, `Sector.open`), then through the real HTTP
app on a real server (the in-process engine, whose pool steps can be held), then with the real process
backend, whose pool process is killed during a request.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import os
import shutil
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from prooflane.circuits import Sector
from prooflane.circuits.sector import MAX_META_BYTES, WrongSectorSize
from prooflane.config import Config
from prooflane.errors import ConfigError, SectorError
from prooflane.files import (
    FileRefused,
    PathForbidden,
    Roots,
    copy_limited,
    open_regular,
    read_limited,
)
from prooflane.states import JobState
from tests.support.daemons import circom_files
from tests.support.engine import WAIT, Served, served

TINY_SECTOR = {"size": 256, "seed": "07"}


@pytest.fixture(scope="module")
def circom(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A .zkey of the tiny winning-post circuit and a good .wtns for it, in a folder of their own."""
    return circom_files(tmp_path_factory.mktemp("circom"))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """The folder this test's daemon may read (besides its data folder)."""
    path = tmp_path / "allowed"
    path.mkdir()
    return path


def make_fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def make_sparse(path: Path, size: int) -> Path:
    """A file of ``size`` bytes that takes no disk space (reading it whole would take ``size`` of memory)."""
    with path.open("wb") as file:
        file.truncate(size)
    return path


# --- the allowed roots ---------------------------------------------------------------------------------


def test_a_path_outside_the_roots_is_forbidden_whether_or_not_it_exists(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    roots = Roots.of([tmp_path / "root"])
    for outside in ("/etc/passwd", f"{tmp_path}/root/../secret", "/no/such/place", f"{tmp_path}/rootx"):
        with pytest.raises(PathForbidden, match="outside the folders this daemon may read") as refused:
            roots.confine(outside, "sector")
        assert repr(outside) in str(refused.value)
        assert "resolves to" not in str(refused.value)  # refused as written: the file system was not asked


def test_a_symlink_inside_the_roots_that_leads_out_is_forbidden(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "key.zkey").write_bytes(b"x")
    (tmp_path / "root" / "link").symlink_to(tmp_path / "outside")
    with pytest.raises(PathForbidden, match="resolves to") as refused:
        Roots.of([tmp_path / "root"]).confine(tmp_path / "root" / "link" / "key.zkey", "zkey")
    assert str(tmp_path / "outside" / "key.zkey") in str(refused.value)


def test_a_root_may_itself_be_a_symlink(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "w.wtns").write_bytes(b"x")
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    roots = Roots.of([tmp_path / "alias"])
    assert roots.confine(tmp_path / "alias" / "w.wtns", "w") == tmp_path / "real" / "w.wtns"
    assert roots.confine(tmp_path / "real" / "w.wtns", "w") == tmp_path / "real" / "w.wtns"


def test_relative_missing_looping_and_nul_paths_are_refused(tmp_path: Path) -> None:
    roots = Roots.of([tmp_path])
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    cases = [
        ("relative/sector", "expected an absolute path"),
        (str(tmp_path / "missing"), "no such file or folder"),
        (str(tmp_path / "a"), "symlink loop"),
        (f"{tmp_path}/x\x00y", "NUL byte"),
    ]
    for path, says in cases:
        with pytest.raises(FileRefused, match=says):
            roots.confine(path, "sector")


def test_allowed_roots_are_read_from_toml_as_absolute_folders(tmp_path: Path) -> None:
    config = tmp_path / "prooflane.toml"
    config.write_text('allowed_roots = ["/srv/sectors", "~/circuits"]\n')
    assert Config.load(config).allowed_roots == (Path("/srv/sectors"), Path.home() / "circuits")
    assert Config().allowed_roots == ()  # the data folder only
    config.write_text('allowed_roots = ["sectors"]\n')
    with pytest.raises(ConfigError, match=r"allowed_roots.*expected an absolute folder"):
        Config.load(config)
    config.write_text('allowed_roots = "/srv"\n')
    with pytest.raises(ConfigError, match="allowed_roots"):
        Config.load(config)


# --- regular files only, with a limit ------------------------------------------------------------------


def _special(tmp_path: Path, kind: str) -> tuple[Path, str]:
    """A file of ``kind`` that is not a regular file, and the words a refusal uses for it."""
    if kind == "fifo":
        return make_fifo(tmp_path / "pipe"), "a FIFO"
    if kind == "device":
        return Path("/dev/zero"), "a character device"
    if kind == "socket":
        path = tmp_path / "sock"
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
        server.close()  # the socket file stays
        return path, "a socket"
    if kind == "folder":
        (tmp_path / "folder").mkdir()
        return tmp_path / "folder", "a folder"
    (tmp_path / "target").write_bytes(b"data")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    return tmp_path / "link", "a symbolic link"


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["fifo", "device", "socket", "folder", "symlink"])
def test_a_file_that_is_not_regular_is_refused_at_once(tmp_path: Path, kind: str) -> None:
    path, words = _special(tmp_path, kind)
    with pytest.raises(FileRefused, match=words) as refused:
        read_limited(path, 1 << 20, "witness")
    assert str(refused.value).startswith(f"witness {str(path)!r}: ")


def test_a_file_over_its_limit_is_refused_before_it_is_read(tmp_path: Path) -> None:
    huge = make_sparse(tmp_path / "huge.wtns", 1 << 40)
    with pytest.raises(FileRefused, match=f"{1 << 40} bytes, more than the 4096 accepted"):
        read_limited(huge, 4096, "witness")
    small = tmp_path / "small"
    small.write_bytes(b"x" * 10)
    with pytest.raises(FileRefused, match="10 bytes, expected 16"):
        read_limited(small, 16, "data", exact=True)
    assert read_limited(small, 10, "data", exact=True) == b"x" * 10
    fd, size = open_regular(small, 10, "data")
    os.close(fd)
    assert size == 10


def test_a_copy_stops_at_its_limit_or_when_given_up(tmp_path: Path) -> None:
    source = tmp_path / "key.zkey"
    source.write_bytes(b"k" * 3000)
    digest = hashlib.sha256()
    assert copy_limited(source, tmp_path / "copy", 4096, "zkey", digest) == 3000
    assert (tmp_path / "copy").read_bytes() == source.read_bytes()
    assert digest.hexdigest() == hashlib.sha256(source.read_bytes()).hexdigest()
    with pytest.raises(FileRefused, match="more than the 1024 accepted"):
        copy_limited(source, tmp_path / "copy2", 1024, "zkey", hashlib.sha256())
    given_up = threading.Event()
    given_up.set()
    with pytest.raises(FileRefused, match="given up"):
        copy_limited(source, tmp_path / "copy3", 4096, "zkey", hashlib.sha256(), given_up)
    with pytest.raises(FileExistsError):  # never written through an existing file (or a symlink there)
        copy_limited(source, tmp_path / "copy", 4096, "zkey", hashlib.sha256())


# --- sectors -------------------------------------------------------------------------------------------


def _sector_with(tmp_path: Path, change: Callable[[Path], None]) -> Path:
    folder = tmp_path / "s"
    Sector.create(folder, 256, seed=9)
    change(folder)
    return folder


def _replace(path: Path, make: Callable[[Path], object]) -> None:
    path.unlink()
    make(path)


SECTOR_CASES: dict[str, tuple[Callable[[Path], None], str]] = {
    "meta.json links to /dev/zero": (
        lambda s: _replace(s / "meta.json", lambda p: p.symlink_to("/dev/zero")),
        "meta.json': a symbolic link",
    ),
    "meta.json is a FIFO": (lambda s: _replace(s / "meta.json", make_fifo), "meta.json': a FIFO"),
    "meta.json is huge": (
        lambda s: _replace(s / "meta.json", lambda p: make_sparse(p, 1 << 30)),
        f"meta.json': {1 << 30} bytes, more than the {MAX_META_BYTES} accepted",
    ),
    "data.bin is a FIFO": (lambda s: _replace(s / "data.bin", make_fifo), "data.bin': a FIFO"),
    "data.bin is a folder": (lambda s: _replace(s / "data.bin", lambda p: p.mkdir()), "data.bin': a folder"),
    "data.bin is endless": (
        lambda s: _replace(s / "data.bin", lambda p: make_sparse(p, 1 << 40)),
        f"data.bin': {1 << 40} bytes, more than the 256 accepted",
    ),
    "a tree is a FIFO": (lambda s: _replace(s / "tree-bn128-r.bin", make_fifo), "tree-bn128-r.bin: a FIFO"),
    "a tree links elsewhere": (
        lambda s: _replace(s / "tree-bn128-d.bin", lambda p: p.symlink_to("/dev/zero")),
        "tree-bn128-d.bin: a symbolic link",
    ),
}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("case", list(SECTOR_CASES))
def test_a_sector_whose_files_are_not_regular_files_of_their_size_is_refused(
    tmp_path: Path, case: str
) -> None:
    change, says = SECTOR_CASES[case]
    folder = _sector_with(tmp_path, change)
    with pytest.raises(SectorError) as refused:
        Sector.open(folder)
    assert says in str(refused.value)


@pytest.mark.timeout(30)
def test_a_sector_of_another_size_is_refused_before_its_data_is_read(tmp_path: Path) -> None:
    def claim_a_terabyte(folder: Path) -> None:
        meta = json.loads((folder / "meta.json").read_text())
        meta.update(size_bytes=1 << 40, leaf_count=(1 << 40) // 32, roots={})
        (folder / "meta.json").write_text(json.dumps(meta))
        _replace(folder / "data.bin", make_fifo)  # read, it would wait forever

    folder = _sector_with(tmp_path, claim_a_terabyte)
    with pytest.raises(WrongSectorSize, match=f"holds {1 << 40} bytes, expected 256"):
        Sector.open(folder, size_bytes=256)


def test_a_file_given_as_a_sector_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(SectorError, match="expected a sector folder"):
        Sector.open(tmp_path / "file")


# --- over HTTP, on a real server -----------------------------------------------------------------------


def post(s: Served, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{s.url}{path}", json=body, timeout=WAIT)


def refused(answer: httpx.Response, status: int, *says: str) -> str:
    """The detail of a refusal with ``status`` that says each of ``says``."""
    assert answer.status_code == status, answer.text
    detail: str = answer.json()["detail"]
    for words in says:
        assert words in detail, (words, detail)
    return detail


def test_sectors_outside_the_allowed_roots_are_403_and_inside_them_accepted(
    engine_config: Callable[..., Config], root: Path, sector: Path, tmp_path: Path
) -> None:
    shutil.copytree(sector, root / "s")
    (root / "link").symlink_to(sector)
    with served(engine_config(allowed_roots=(root,))) as s:
        s.hold()  # accepted jobs wait at synthesis: nothing is proven on the server's loop meanwhile
        refused(
            post(s, "/v1/jobs", {"kind": "winning-post", "sector": str(sector)}),
            403,
            str(sector),
            "allowed_roots",
        )
        detail = refused(post(s, "/v1/jobs", {"kind": "winning-post", "sector": str(root / "link")}), 403)
        assert f"resolves to {str(sector)!r}" in detail
        refused(post(s, "/v1/jobs", {"kind": "winning-post", "sector": "relative/s"}), 422, "absolute path")
        refused(
            post(s, "/v1/jobs", {"kind": "winning-post", "sector": str(root / "none")}), 422, "no such file"
        )
        accepted = post(s, "/v1/jobs", {"kind": "winning-post", "sector": str(root / "s")})
        assert accepted.status_code == 202, accepted.text
        assert post(s, "/v1/jobs", {"kind": "winning-post", "sector": TINY_SECTOR}).status_code == 202
    with served(engine_config()) as s:  # by default: the data folder only
        detail = refused(post(s, "/v1/jobs", {"kind": "winning-post", "sector": str(root / "s")}), 403)
        assert str(tmp_path / "data") in detail


@pytest.mark.timeout(60)
def test_sector_folders_with_bad_files_are_422_naming_the_file(
    engine_config: Callable[..., Config], root: Path
) -> None:
    for name, (change, _) in SECTOR_CASES.items():
        folder = root / name.replace(" ", "-").replace("/", "_")
        Sector.create(folder, 256, seed=1)
        change(folder)
    (root / "plain-file").write_text("not a sector")
    with served(engine_config(allowed_roots=(root,))) as s:
        for name, (_, says) in SECTOR_CASES.items():
            folder = root / name.replace(" ", "-").replace("/", "_")
            refused(post(s, "/v1/jobs", {"kind": "window-post", "sector": str(folder)}), 422, says)
        refused(
            post(s, "/v1/jobs", {"kind": "window-post", "sector": str(root / "plain-file")}), 422, "folder"
        )
        assert httpx.get(f"{s.url}/v1/jobs").json() == []


def test_inline_sectors_of_another_size_or_a_bad_seed_are_422_and_leave_nothing(
    engine_config: Callable[..., Config], tmp_path: Path
) -> None:
    with served(engine_config()) as s:
        body = {"kind": "porep-c2", "sector": {"size": 1 << 40}, "job_id": "huge"}
        refused(post(s, "/v1/jobs", body), 422, f"{1 << 40} bytes", "256 bytes")
        body = {"kind": "porep-c2", "sector": {"size": 256, "seed": "zz"}, "job_id": "seedless"}
        refused(post(s, "/v1/jobs", body), 422, "sector.seed", "hex")
        sectors = tmp_path / "data" / "sectors"
        assert not sectors.exists() or list(sectors.iterdir()) == []


@pytest.mark.timeout(120)
def test_witness_files_are_confined_and_must_be_regular_files_of_a_sane_size(
    engine_config: Callable[..., Config], root: Path, circom: dict[str, Path], tmp_path: Path
) -> None:
    shutil.copy(circom["good"], root / "good.wtns")
    make_fifo(root / "pipe.wtns")
    (root / "dir.wtns").mkdir()
    (root / "loop.wtns").symlink_to(root / "loop.wtns")
    (root / "zero.wtns").symlink_to("/dev/zero")
    make_sparse(root / "huge.wtns", 1 << 30)
    with served(engine_config(allowed_roots=(root, circom["zkey"].parent))) as s:
        s.hold()  # accepted jobs wait at synthesis: nothing is proven on the server's loop meanwhile
        registered = post(s, "/v1/circuits", {"name": "wp", "zkey": str(circom["zkey"])})
        assert registered.status_code == 201, registered.text

        def job(witness: str) -> httpx.Response:
            return post(s, "/v1/jobs", {"kind": "circom", "circuit": "wp", "witnesses": [witness]})

        refused(job(str(circom["good"]).replace(str(circom["zkey"].parent), str(tmp_path))), 403)
        refused(job(str(root / "pipe.wtns")), 422, "witnesses[0]", "pipe.wtns", "a FIFO")
        refused(job(str(root / "dir.wtns")), 422, "dir.wtns", "a folder")
        refused(job(str(root / "loop.wtns")), 422, "loop.wtns", "symlink loop")
        refused(job(str(root / "zero.wtns")), 403, "resolves to '/dev/zero'")
        refused(job(str(root / "huge.wtns")), 422, "huge.wtns", f"{1 << 30} bytes, more than")
        accepted = job(str(root / "good.wtns"))
        assert accepted.status_code == 202, accepted.text
        journalled = httpx.get(f"{s.url}/v1/jobs/{accepted.json()['job_id']}").json()
        assert journalled["total_partitions"] == 1


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("swap", "says"),
    [
        (make_fifo, "a FIFO"),
        (lambda path: make_sparse(path, 1 << 30), f"{1 << 30} bytes, more than"),
    ],
    ids=["fifo", "huge"],
)
def test_a_witness_swapped_after_the_job_was_accepted_fails_its_partition_naming_the_file(
    engine_config: Callable[..., Config],
    root: Path,
    circom: dict[str, Path],
    swap: Callable[[Path], Path],
    says: str,
) -> None:
    witness = root / "w.wtns"
    shutil.copy(circom["good"], witness)
    with served(engine_config(allowed_roots=(root, circom["zkey"].parent))) as s:
        held = s.hold()
        registered = post(s, "/v1/circuits", {"name": "wp", "zkey": str(circom["zkey"])})
        assert registered.status_code == 201, registered.text
        accepted = post(s, "/v1/jobs", {"kind": "circom", "circuit": "wp", "witnesses": [str(witness)]})
        assert accepted.status_code == 202, accepted.text
        job_id = accepted.json()["job_id"]
        s.reached(held)
        witness.unlink()
        swap(witness)
        s.release(held)
        assert s.done(job_id) == JobState.FAILED
        error = httpx.get(f"{s.url}/v1/jobs/{job_id}").json()["error"]
        assert "partition 0" in error and str(witness) in error and says in error, error


@pytest.mark.timeout(120)
def test_registration_files_are_confined_checked_and_leave_nothing_when_refused(
    engine_config: Callable[..., Config], root: Path, circom: dict[str, Path], tmp_path: Path
) -> None:
    make_fifo(root / "pipe.zkey")
    (root / "dir.zkey").mkdir()
    make_sparse(root / "huge.zkey", 2 << 30)  # more than the whole memory budget (1 GiB)
    (root / "junk.zkey").write_bytes(b"not a zkey at all")
    (root / "zero.wasm").symlink_to("/dev/zero")
    shutil.copy(circom["zkey"], root / "c.zkey")
    with served(engine_config(allowed_roots=(root,))) as s:

        def register(zkey: Path | str, **more: str) -> httpx.Response:
            return post(s, "/v1/circuits", {"name": "c", "zkey": str(zkey), **more})

        refused(register(circom["zkey"]), 403, str(circom["zkey"]), "allowed_roots")
        refused(register(root / "pipe.zkey"), 422, "pipe.zkey", "a FIFO")
        refused(register(root / "dir.zkey"), 422, "dir.zkey", "a folder")
        refused(register(root / "huge.zkey"), 422, "huge.zkey", f"{2 << 30} bytes, more than the {1 << 30}")
        refused(register(root / "junk.zkey"), 422, "junk.zkey")
        refused(register(root / "c.zkey", wasm=str(root / "zero.wasm")), 403, "zero.wasm", "/dev/zero")
        circuits = tmp_path / "data" / "circuits"
        assert not circuits.exists() or list(circuits.iterdir()) == []  # nothing kept of any of them
        assert register(root / "c.zkey").status_code == 201
        assert register(root / "c.zkey").status_code == 201  # the same files again: the same circuit
        shutil.copy(circom["good"], root / "other.zkey")
        refused(register(root / "other.zkey"), 409, "other files")
        assert sorted(p.name for p in circuits.iterdir()) == ["c"]


# --- nothing heavy on the event loop -------------------------------------------------------------------


def test_healthz_answers_while_an_inline_sector_is_built(engine_config: Callable[..., Config]) -> None:
    with served(engine_config()) as s, concurrent.futures.ThreadPoolExecutor(2) as pool:
        s.hold()  # the job, once accepted, waits at synthesis: nothing is proven on the server's loop
        building = s.hold(lambda step: step.call == "create_sector")
        body = {"kind": "winning-post", "sector": TINY_SECTOR, "job_id": "slow-sector"}
        submitting = pool.submit(post, s, "/v1/jobs", body)
        again = None
        s.run(asyncio.wait_for(building.reached.wait(), WAIT))  # the build is in flight
        try:
            assert httpx.get(f"{s.url}/healthz", timeout=WAIT).status_code == 200
            assert httpx.get(f"{s.url}/status", timeout=WAIT).json()["invariants_ok"] is True
            again = pool.submit(post, s, "/v1/jobs", body)  # the same job id while the first is admitted
            assert not submitting.done()
        finally:
            s.release(building)
        assert submitting.result(WAIT).status_code == 202
        assert again is not None and again.result(WAIT).json() == {"job_id": "slow-sector"}
        assert [j["job_id"] for j in httpx.get(f"{s.url}/v1/jobs").json()] == ["slow-sector"]


def test_healthz_answers_while_a_registration_is_inspected(
    engine_config: Callable[..., Config], circom: dict[str, Path]
) -> None:
    with served(engine_config(allowed_roots=(circom["zkey"].parent,))) as s:
        inspecting = s.hold(lambda step: step.call == "inspect_zkey")
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            registering = pool.submit(post, s, "/v1/circuits", {"name": "slow", "zkey": str(circom["zkey"])})
            s.run(asyncio.wait_for(inspecting.reached.wait(), WAIT))
            try:
                assert httpx.get(f"{s.url}/healthz", timeout=WAIT).status_code == 200
                assert httpx.get(f"{s.url}/v1/circuits", timeout=WAIT).json() == []
                assert not registering.done()
            finally:
                s.release(inspecting)
            assert registering.result(WAIT).status_code == 201


# --- a pool process that dies during a request -----------------------------------------------------------
