"""The synthesis entry point's circom key cache: bounded by its size, and never stale."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from prooflane.groth16 import BN128, setup, write_wtns, write_zkey
from prooflane.kinds import synthesis
from prooflane.kinds.spec import CircomInput, SynthesisTask
from tests.support.groth16_samples import square_chain


def circuit(folder: Path, n: int) -> tuple[Path, Path]:
    """A square chain of ``n`` steps: its key and a witness of it."""
    r1cs, witness = square_chain(BN128, n)
    key, wtns = folder / f"chain{n}.zkey", folder / f"chain{n}.wtns"
    write_zkey(key, setup(r1cs, seed=b"synthesis-cache"))
    write_wtns(wtns, witness)
    return key, wtns


def synthesize(key: Path, wtns: Path, cache_bytes: int) -> None:
    task = SynthesisTask("job", 0, str(key), CircomInput(str(wtns), None), cache_bytes)
    synthesis.synthesize_partition(task)


@pytest.fixture(autouse=True)
def empty_cache() -> None:
    synthesis._MATRICES.clear()


def test_the_keys_kept_fit_in_the_bound_and_the_one_in_use_is_kept(tmp_path: Path) -> None:
    chains = [circuit(tmp_path, n) for n in (4, 5, 6, 7)]
    size = max(key.stat().st_size for key, _ in chains)
    for key, wtns in chains:
        synthesize(key, wtns, 2 * size)
        kept = [Path(p).stat().st_size for p in synthesis._MATRICES]
        assert str(key) in synthesis._MATRICES and sum(kept) <= 2 * size
    assert list(synthesis._MATRICES) == [str(k) for k, _ in chains[-2:]]  # least recently used went first
    synthesize(*chains[0], 0)  # 0: only the key in use
    assert list(synthesis._MATRICES) == [str(chains[0][0])]


def test_a_key_changed_on_disk_is_read_again(tmp_path: Path) -> None:
    (key4, wtns4), (key9, wtns9) = circuit(tmp_path, 4), circuit(tmp_path, 9)
    synthesize(key4, wtns4, 1 << 30)
    with pytest.raises(ValueError, match="this witness has 13 wires, the circuit 8"):
        synthesize(key4, wtns9, 1 << 30)
    fd = os.open(key4, os.O_WRONLY | os.O_TRUNC)  # the nine-step key written over the four-step one
    try:
        os.write(fd, key9.read_bytes())
    finally:
        os.close(fd)
    synthesize(key4, wtns9, 1 << 30)  # read again: the new key's matrices, not the old ones
