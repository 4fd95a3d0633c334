"""``prooflane.groth16`` stands alone: it imports nothing of prooflane's, and its errors are prooflane's."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import prooflane.errors as errors
import prooflane.groth16 as groth16
from prooflane.groth16 import BN128, read_zkey, setup, write_zkey
from prooflane.groth16 import errors as groth16_errors
from tests.support.groth16_samples import square_chain

PACKAGE = Path(groth16.__file__).resolve().parent


def _imports(path: Path) -> list[tuple[int, str]]:
    """(relative level, module) of every import in ``path``; level 0 is an absolute import."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            found.append((node.level, node.module or ""))
        elif isinstance(node, ast.Import):
            found.extend((0, alias.name) for alias in node.names)
    return found


def test_groth16_imports_nothing_outside_itself() -> None:
    sources = sorted(PACKAGE.rglob("*.py"))
    assert len(sources) > 5
    leaving = [
        f"{path.name}: {'.' * level}{module}"
        for path in sources
        for level, module in _imports(path)
        # A relative import may climb as far as the package's own folder, no further.
        if level > 1 + len(path.parent.relative_to(PACKAGE).parts)
        or (level == 0 and module.split(".")[0] == "prooflane" and not module.startswith("prooflane.groth16"))
    ]
    assert leaving == []


def test_the_scan_sees_an_import_that_leaves_the_package(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from ..errors import FormatError\nimport prooflane.engine\n")
    assert _imports(bad) == [(2, "errors"), (0, "prooflane.engine")]


def test_groth16_imports_and_runs_as_a_top_level_package(tmp_path: Path) -> None:
    r1cs, _ = square_chain(BN128, 4)
    tiny_zkey = tmp_path / "tiny.zkey"
    write_zkey(tiny_zkey, setup(r1cs, seed=b"standalone"))
    shutil.copytree(PACKAGE, tmp_path / "groth16", ignore=shutil.ignore_patterns("__pycache__"))
    script = (
        "import sys, groth16\n"
        "from groth16.errors import FormatError, Groth16Error\n"
        "assert 'prooflane' not in sys.modules, sorted(m for m in sys.modules if 'prooflane' in m)\n"
        "key = groth16.read_zkey(sys.argv[1])\n"
        "try:\n"
        "    groth16.read_zkey(sys.argv[1] + '.missing')\n"
        "except FormatError as exc:\n"
        "    assert isinstance(exc, Groth16Error) and FormatError.__mro__[2] is Exception\n"
        "print(key.curve.name)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tiny_zkey)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "bn128"


def test_groth16_errors_are_prooflane_errors(tmp_path: Path) -> None:
    assert errors.FormatError is groth16_errors.FormatError
    assert errors.InvalidWitnessError is groth16_errors.InvalidWitnessError
    assert errors.KeyMismatchError is groth16_errors.KeyMismatchError
    with pytest.raises(errors.ProoflaneError, match="cannot read") as info:
        read_zkey(tmp_path / "absent.zkey")
    assert isinstance(info.value, groth16_errors.FormatError)
    assert info.value.path == str(tmp_path / "absent.zkey")


def test_every_groth16_error_says_when_it_is_raised() -> None:
    for name in groth16_errors.__all__:
        cls = getattr(groth16_errors, name)
        assert issubclass(cls, groth16_errors.Groth16Error)
        assert (cls.__doc__ or "").startswith("Raised when"), cls
