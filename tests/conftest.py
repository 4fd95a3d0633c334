"""Shared fixtures."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from prooflane.circuits import Sector
from prooflane.config import Config
from prooflane.groth16 import BN128, setup, write_zkey
from tests.support.engine import Harness, running, tiny_config
from tests.support.groth16_samples import square_chain
from tests.support.paths import NODE_BIN, OUTPUT

# The cuda kernels run in numba's CUDA simulator where no NVIDIA driver is (numba reads this once, on import).
if "NUMBA_ENABLE_CUDASIM" not in os.environ and not Path("/dev/nvidiactl").exists():
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"


@pytest.fixture(scope="session")
def snarkjs() -> Path:
    """Path of the snarkjs CLI installed by `make` into node_modules."""
    path = NODE_BIN / "snarkjs"
    if not path.exists():
        pytest.fail("snarkjs is not installed: run `make test` (it runs `npm ci`)")
    return path


@pytest.fixture(scope="session")
def node() -> str:
    path = shutil.which("node")
    if path is None:
        pytest.fail("node is not on PATH")
    return path


@pytest.fixture
def anyio_backend() -> str:
    """Every async test runs on asyncio (prooflane's one runtime)."""
    return "asyncio"


@pytest.fixture(scope="session")
def keys_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Proving keys shared by every engine of the session (made once, like a daemon's cache)."""
    return tmp_path_factory.mktemp("keys")


@pytest.fixture(scope="session")
def shared_inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of the session's shared input files (a sector, a circuit): engines made by
    ``engine_config`` may read it (``allowed_roots``), as an operator lists the folders of their inputs."""
    return tmp_path_factory.mktemp("inputs")


@pytest.fixture(scope="session")
def sector(shared_inputs: Path) -> Path:
    """A tiny-profile sector folder (256 bytes), shared by the session's tests (read only)."""
    path = shared_inputs / "s"
    Sector.create(path, 256, seed=7)
    return path


@pytest.fixture
def engine_config(tmp_path: Path, keys_dir: Path, shared_inputs: Path) -> Callable[..., Config]:
    """Configs of a one-worker tiny-profile engine in this test's folder, allowed to read its data folder
    and the session's shared inputs; keyword arguments change keys."""

    def config(**overrides: object) -> Config:
        values: dict[str, object] = {"allowed_roots": (shared_inputs,)}
        return tiny_config(tmp_path / "data", keys_dir, **(values | overrides))

    return config


@pytest.fixture
async def h(engine_config: Callable[..., Config], sector: Path) -> AsyncIterator[Harness]:
    """A started engine on the in-process backend (see engine_support), stopped after the test; the jobs
    ``h.submit`` makes prove the session's sector."""
    async with running(engine_config(), sector=sector) as harness:
        yield harness


@pytest.fixture(scope="session")
def circuit_files(shared_inputs: Path) -> tuple[Path, Path]:
    """(zkey, wasm) of a small circom-style circuit (a chain of squares, BN254) for registration tests.

    The .zkey is a real Groth16 key in snarkjs's format; the daemon reads it in full when the circuit is
    registered. The .wasm is only copied at registration (it runs when a job gives circuit inputs), so its
    bytes here are a module header and nothing more."""
    folder = shared_inputs / "circuit"
    folder.mkdir()
    r1cs, _ = square_chain(BN128, 4)
    write_zkey(folder / "chain.zkey", setup(r1cs, seed=b"api-tests"))
    (folder / "chain.wasm").write_bytes(b"\0asm\x01\0\0\0")
    return folder / "chain.zkey", folder / "chain.wasm"


@pytest.fixture
def output_dir(request: pytest.FixtureRequest) -> Path:
    """A per-test folder under test-output/ for artifacts worth keeping (screenshots, logs)."""
    path: Path = OUTPUT / str(request.node.name)
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs mounted for this test, to fill (skipped where mounting is not allowed)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


os.environ.setdefault("PROOFLANE_TEST", "1")
# Keys whose points passed the subgroup checks are remembered here, not in the user's cache folder.
os.environ.setdefault("PROOFLANE_POINT_CHECKS", str(OUTPUT / "point-checks"))
# Fixed-base tables a test stores go here too (tests that look at them set a folder of their own).
os.environ.setdefault("PROOFLANE_TABLES", str(OUTPUT / "msm-tables"))
# And the witness generators they compile.
os.environ.setdefault("PROOFLANE_WASM_CACHE", str(OUTPUT / "wasm"))


LANES = {"e2e": "slow", "engine": "engine", "groth16/cuda": "engine"}
"""The lanes, by folder of tests/ (the only place a test's lane is chosen, so that none drifts into or out of
``make check``): the folder -> the lane's marker. Every test of a folder is in its lane; a lane's marker on a
test anywhere else is an error that says where the test belongs."""


def lane_of(path: Path) -> str | None:
    """The lane of a test file by its folder (None: the unit lane)."""
    try:
        relative = path.relative_to(Path(__file__).parent).as_posix()
    except ValueError:
        return None
    return next((lane for folder, lane in LANES.items() if relative.startswith(folder + "/")), None)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put each test in its folder's lane; a lane's marker on a test outside the lane's folders is refused."""
    homes = {lane: [f"tests/{f}/" for f, m in LANES.items() if m == lane] for lane in set(LANES.values())}
    for item in items:
        lane = lane_of(item.path)
        for marker, folders in homes.items():
            if marker != lane and item.get_closest_marker(marker) is not None:
                where = " or ".join(folders)
                raise pytest.UsageError(
                    f"{item.nodeid}: marked {marker}; a test's lane is its folder: move it to {where}"
                )
        if lane is not None:
            item.add_marker(lane)
