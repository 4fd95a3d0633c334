"""Where the repository's own files are, for tests that read them or run its tools."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository's root."""
NODE_BIN = ROOT / "node_modules" / ".bin"
"""snarkjs, circom2 and the other node tools `make` installs."""
SHARED_BENCH = ROOT.parent / "shared" / "bench"
"""Benchmark inputs shared beside the repository, when present."""
OUTPUT = ROOT / "test-output"
"""Artifacts worth keeping after a run (screenshots, logs)."""
