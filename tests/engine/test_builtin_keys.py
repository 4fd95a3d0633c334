"""The key cache of the built-in kinds: a key is made once (a real setup, seconds) and reused."""

from __future__ import annotations

from pathlib import Path

from prooflane.kinds import prepare_builtin


def test_prepare_builtin_makes_the_key_once_and_reuses_it(tmp_path: Path) -> None:
    meta = prepare_builtin("winning-post", "tiny", "bn128", str(tmp_path))
    key = Path(meta.key_path)
    made = key.stat().st_mtime_ns
    again = prepare_builtin("winning-post", "tiny", "bn128", str(tmp_path))
    assert again == meta and key.stat().st_mtime_ns == made
    assert meta.curve == "bn128" and meta.constraints > 0 and meta.domain_size >= meta.constraints
    assert meta.vk["protocol"] == "groth16" and meta.key_nbytes > 0
