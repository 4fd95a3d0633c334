"""A proving key's file deleted while the engine runs: a built-in kind's is made again (the same bytes) and
its jobs prove; a registered circuit's refuses its jobs (503) naming the file, health says so, and
registering the circuit again with the same files puts it back."""

from __future__ import annotations

import asyncio
import hashlib
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from prooflane.config import Config
from prooflane.engine import keyfiles
from prooflane.errors import Unavailable
from prooflane.groth16 import BN128, write_wtns
from prooflane.models import JobRequest
from prooflane.states import JobState
from tests.support.engine import WAIT, running, tiny_config
from tests.support.groth16_samples import square_chain

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]


async def own_keys(keys_dir: Path, tmp_path: Path) -> Path:
    """A keys folder of this test's own (a copy of the session's, made first where it is not yet)."""
    async with running(tiny_config(tmp_path / "warm", keys_dir)):
        pass
    return Path(shutil.copytree(keys_dir, tmp_path / "keys"))


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def test_a_deleted_key_of_a_built_in_kind_is_made_again_the_same_and_its_jobs_prove(
    keys_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    keys = await own_keys(keys_dir, tmp_path)
    monkeypatch.setattr(keyfiles, "CHECK_SECS", 0.05)
    async with running(tiny_config(tmp_path / "data", keys)) as h:
        [winning] = keys.glob("winning-post-tiny-*.zkey")
        [window] = keys.glob("window-post-tiny-*.zkey")
        before = {winning: digest(winning), window: digest(window)}

        winning.unlink()  # a job that needs it comes first: it waits for the key, then proves
        job = await h.submit("winning-post")
        assert await h.done(job) is JobState.DONE
        assert digest(winning) == before[winning]

        window.unlink()  # no job comes: the watch makes it again by itself
        async with asyncio.timeout(WAIT):
            while not (window.exists() and h.engine.health().ok):  # noqa: ASYNC110 (the watch's own loop)
                await asyncio.sleep(0.02)
        assert digest(window) == before[window]
        said = [r.getMessage() for r in caplog.records if r.name == "prooflane.engine"]
        for path in (winning, window):
            assert any(m.startswith("the key of ") and f"({path}): making it again" in m for m in said), said
        assert await h.done(await h.submit("window-post")) is JobState.DONE
        await h.assert_clean()


async def test_a_deleted_key_of_a_registered_circuit_refuses_its_jobs_until_it_is_registered_again(
    engine_config: Callable[..., Config], circuit_files: tuple[Path, Path], tmp_path: Path
) -> None:
    zkey, wasm = circuit_files
    _, witness = square_chain(BN128, 4)
    (tmp_path / "data").mkdir()
    write_wtns(tmp_path / "data" / "w.wtns", witness)  # the data folder: the engine may read it
    job = JobRequest(kind="circom", circuit="chain", witnesses=[str(tmp_path / "data" / "w.wtns")])
    async with running(engine_config()) as h:
        await h.engine.register_circuit("chain", zkey, wasm_path=wasm)
        kept = tmp_path / "data" / "circuits" / "chain" / "circuit.zkey"
        assert kept.exists()
        kept.unlink()

        with pytest.raises(Unavailable) as refused:
            await h.engine.submit(job)
        said = str(refused.value)
        assert f"{kept} is missing" in said and "registered again" in said, said
        health = h.engine.health()
        assert not health.ok and any(f"circuit 'chain': its key file {kept}" in r for r in health.reasons)
        assert h.engine.jobs() == []  # nothing was journalled

        info = await h.engine.register_circuit("chain", zkey, wasm_path=wasm)  # the same files again
        assert info.name == "chain" and kept.exists() and digest(kept) == digest(zkey)
        assert h.engine.health().ok, h.engine.health().reasons
        assert await h.done(await h.engine.submit(job)) is JobState.DONE
        await h.assert_clean()
