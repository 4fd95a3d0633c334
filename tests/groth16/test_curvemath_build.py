"""The C extension's build: the core free of Python (only module.c includes Python.h, and the core's
headers compile without it, with and without the assembly), setup.py's view of the headers, what the
package ships, and that a lane's build is the one loaded (``PROOFLANE_CURVEMATH_SO``,
``PROOFLANE_EXPECT_ASM``: see docs/groth16.md, "The C extension")."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sysconfig
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

from prooflane.groth16.arithmetic import load_extension
from tests.support.arithmetics import extension_module

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "src" / "prooflane" / "groth16" / "csrc"
SO_ENV, EXPECT_ASM_ENV = "PROOFLANE_CURVEMATH_SO", "PROOFLANE_EXPECT_ASM"


def _setup_py() -> ModuleType:
    spec = importlib.util.spec_from_file_location("prooflane_setup", ROOT / "setup.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # setup() runs only as __main__
    return module


def _compiler() -> list[str] | None:
    cc = shlex.split(sysconfig.get_config_var("CC") or "cc")
    return cc if cc and shutil.which(cc[0]) else None


def test_the_loaded_build_is_the_one_the_lane_asked_for() -> None:
    if os.environ.get(SO_ENV):  # a lane's build must load: its tests would otherwise all skip
        module, why = load_extension()
        assert module is not None, why
        assert module.__file__ is not None
        assert Path(module.__file__).samefile(os.environ[SO_ENV])
    module = extension_module()
    if os.environ.get(EXPECT_ASM_ENV):
        assert module.asm == int(os.environ[EXPECT_ASM_ENV])


def test_the_constants_say_what_runs() -> None:
    module = extension_module()
    assert module.asm in (0, 1)
    assert bool(module.asm) == bool(module.capabilities()["built"])  # the kernels are part of the assembly
    assert module.max_threads == 64


def test_the_cpu_is_read_in_one_place_and_the_environment_nowhere() -> None:
    """csrc/cpu.h alone asks the CPU what it has; no C file reads the environment (Python applies
    PROOFLANE_NO_IFMA: arithmetic/extension.py)."""
    sources = sorted(CSRC.glob("*.[ch]"))
    asking = [p.name for p in sources if re.search(r"cpuid|xgetbv|__builtin_cpu_|getauxval", p.read_text())]
    assert asking == ["cpu.h"]
    assert [p.name for p in sources if re.search(r"\b(secure_)?getenv\b|\benviron\b", p.read_text())] == []


def test_only_module_c_includes_python() -> None:
    sources = sorted(CSRC.glob("*.[ch]"))
    assert [p.name for p in sources if "Python.h" in p.read_text()] == ["module.c"]
    for path in sources:
        if path.name != "module.c":
            assert not re.search(r"\bPy[A-Z_]\w*", path.read_text()), path.name


def test_the_ntt_lanes_feed_no_unreduced_sum_to_a_product() -> None:
    """ifma_ntt.h's bound (its note): every operand of a product below r, so that r < 2^256 suffices, which
    BLS12-381's 255-bit r meets; an unreduced v260_sum (below 2r) would need r < 2^254, which it does not.
    tests/c/test_core.c checks the bounds against each modulus."""
    code = re.sub(r"/\*.*?\*/", "", (CSRC / "ifma_ntt.h").read_text(), flags=re.DOTALL)  # not the note
    assert "v260_mul" in code and not re.search(r"\bv260_sum\b", code)


def test_setup_builds_module_c_and_depends_on_every_header() -> None:
    (extension,) = _setup_py()._extensions()
    assert [Path(s).name for s in extension.sources] == ["module.c"]
    assert sorted(Path(d).name for d in extension.depends) == sorted(p.name for p in CSRC.glob("*.h"))
    assert [p.name for p in CSRC.glob("*.c")] == ["module.c"]
    assert {"-Wall", "-Wextra"} <= set(extension.extra_compile_args)


def test_warnings_are_errors_in_the_test_lanes_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A user's ``pip install`` must not break on a newer compiler's new warning; the lanes' builds
    (``PROOFLANE_WERROR=1``) fail on any."""
    setup_py = _setup_py()
    monkeypatch.delenv("PROOFLANE_WERROR", raising=False)
    (extension,) = setup_py._extensions()
    assert "-Werror" not in extension.extra_compile_args
    monkeypatch.setenv("PROOFLANE_WERROR", "1")
    (extension,) = setup_py._extensions()
    assert "-Werror" in extension.extra_compile_args


def test_setup_honours_the_opt_out_and_the_portable_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    setup_py = _setup_py()
    monkeypatch.setenv("PROOFLANE_NATIVE", "0")
    assert setup_py._extensions() == []
    monkeypatch.delenv("PROOFLANE_NATIVE")
    monkeypatch.setenv("PROOFLANE_NO_ASM", "1")
    (extension,) = setup_py._extensions()
    assert ("PROOFLANE_NO_ASM", "1") in extension.define_macros


@pytest.mark.parametrize("portable", [False, True], ids=["asm", "no-asm"])
def test_the_core_compiles_without_python(portable: bool) -> None:
    cc = _compiler()
    if cc is None:
        pytest.skip("no C compiler")
    flags = ["-std=gnu11", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", "-Wno-unused-function"]
    source = '#include "core.h"\nint main(void) { core_init(); return kernel_runs(KERNEL_MULX) + CORE_ASM; }'
    done = subprocess.run(
        [*cc, *flags, *(["-DPROOFLANE_NO_ASM"] if portable else []), f"-I{CSRC}", "-x", "c", "-"],
        input=source + "\n",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_the_package_ships_the_stub_and_the_sources() -> None:
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    package = ROOT / "src" / "prooflane"
    shipped = {p for pattern in patterns["prooflane"] for p in package.glob(pattern)}
    assert package / "groth16" / "_curvemath.pyi" in shipped
    assert set(CSRC.glob("*.[ch]")) <= shipped
