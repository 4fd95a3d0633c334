"""The package's floor plan, as docs/architecture.md draws it: parts and their ranks (the package root among
them), arrows only downwards, the pairs a part knows nothing of, no private names across parts, no import
circles, source files under 600 lines, faces that are only faces, and one home for each rule that matters."""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import prooflane

PACKAGE = Path(prooflane.__file__).parent
ROOT = PACKAGE.parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
MAX_LINES = 600
SOURCES = ("*.py", "*.pyi", "*.c", "*.h", "*.js")  # what the line limit counts
ROOT_MODULE = "prooflane"  # the package root's face: a part of its own, matched by its name only


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _parts() -> dict[str, tuple[int, str]]:
    """Module prefix (``prooflane.engine``, ``prooflane.errors``) -> (rank, part), from the docs' table."""
    parts: dict[str, tuple[int, str]] = {}
    for line in ARCHITECTURE.read_text().splitlines():
        cells = _cells(line)
        if len(cells) < 3 or not cells[0].isdigit():
            continue
        rank, part = int(cells[0]), cells[1]
        for name in re.findall(r"`([^`]+)`", cells[2]):
            module = name.removesuffix("/").removesuffix(".py").replace("/", ".")
            parts[ROOT_MODULE if module == "__init__" else f"prooflane.{module}"] = (rank, part)
    return parts


PARTS = _parts()


def _forbidden() -> dict[str, tuple[str, ...]]:
    """Part -> the import names it may not import, from the docs' "What a part knows nothing of" table."""
    text = ARCHITECTURE.read_text()
    section = text.split("## What a part knows nothing of", 1)[1].split("\n## ", 1)[0]
    known = {part for _, part in PARTS.values()}
    pairs: dict[str, tuple[str, ...]] = {}
    for line in section.splitlines():
        cells = _cells(line)
        if len(cells) == 2 and cells[0] in known:
            pairs[cells[0]] = tuple(re.findall(r"`([^`]+)`", cells[1]))
    return pairs


FORBIDDEN = _forbidden()


@dataclass(frozen=True)
class Import:
    importer: str  # the importing module
    module: str  # the imported module, absolute
    names: tuple[str, ...]  # the names taken from it ("" for a plain ``import x``)
    line: int
    top_level: bool  # at module level (not in a function, not under TYPE_CHECKING)


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(module: str, path: Path) -> Iterator[Import]:
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    lazy: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or (
            isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        ):
            lazy.update(id(child) for child in ast.walk(node) if child is not node)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            names = tuple(alias.name for alias in node.names)
            yield Import(module, target, names, node.lineno, id(node) not in lazy)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, alias.name, ("",), node.lineno, id(node) not in lazy)


@functools.cache
def all_imports() -> list[Import]:
    """Every import statement of prooflane's modules (parsed once, by the first test that asks)."""
    return [i for module, path in MODULES.items() for i in _imports(module, path)]


@functools.cache
def root_names() -> dict[str, str]:
    """Name -> the module that defines it, for each name the package root offers (loaded on first use or not:
    its imports, those under TYPE_CHECKING included, name them all)."""
    return {
        name: imp.module for imp in all_imports() if imp.importer == ROOT_MODULE for name in imp.names if name
    }


def part_of(module: str) -> tuple[int, str] | None:
    """The rank and part of a module of prooflane (None: not prooflane's)."""
    if module == ROOT_MODULE:
        return PARTS.get(ROOT_MODULE)
    inside = [p for p in PARTS if p != ROOT_MODULE and (module == p or module.startswith(p + "."))]
    best = max(inside, key=len, default=None)
    return None if best is None else PARTS[best]


def _targets(imp: Import) -> list[tuple[str, str]]:
    """(module, name) pairs an import reaches: ``from .x import y`` reaches module ``x.y`` when y is one,
    and a name taken from the package root reaches the root and the module that defines it."""
    reached = []
    for name in imp.names:
        sub = f"{imp.module}.{name}"
        if sub in MODULES:
            reached.append((sub, ""))
            continue
        reached.append((imp.module, name))
        if imp.module == ROOT_MODULE and name in root_names() and imp.importer != ROOT_MODULE:
            reached.append((root_names()[name], name))
    return reached


def upward_imports(imports: list[Import]) -> list[str]:
    """Imports that point up the table (a part importing a part of a higher rank)."""
    upward = []
    for imp in imports:
        mine = part_of(imp.importer)
        for module, _ in _targets(imp):
            theirs = part_of(module)
            if mine is not None and theirs is not None and theirs[0] > mine[0]:
                upward.append(f"{imp.importer}:{imp.line} ({mine[1]}) imports {module} ({theirs[1]})")
    return upward


def forbidden_imports(imports: list[Import], forbidden: dict[str, tuple[str, ...]]) -> list[str]:
    """Imports of what the importer's part knows nothing of (its own part's modules always allowed)."""
    found = []
    for imp in imports:
        mine = part_of(imp.importer)
        banned = forbidden.get(mine[1], ()) if mine else ()
        for module, _ in _targets(imp):
            if part_of(module) == mine:
                continue
            hit = [b for b in banned if module == b or module.startswith(b + ".")]
            if hit:
                found.append(
                    f"{imp.importer}:{imp.line} ({mine and mine[1]}) imports {module}, forbidden by {hit[0]}"
                )
    return found


def test_the_docs_table_names_every_module_once() -> None:
    assert len({part for _, part in PARTS.values()}) == len({rank for rank, _ in PARTS.values()}) == 12
    unplaced = [m for m in MODULES if part_of(m) is None]
    assert unplaced == [], "modules the table of docs/architecture.md does not place"
    assert set(root_names()) >= {"Client", "Config", "Engine", "ProoflaneError"}


def test_arrows_point_down_the_table_only() -> None:
    assert upward_imports(all_imports()) == []


def test_no_part_imports_what_it_knows_nothing_of() -> None:
    assert set(FORBIDDEN) == {"groth16", "devices", "status", "engine", "server", "fleet"}
    assert forbidden_imports(all_imports(), FORBIDDEN) == []


def _synthetic(importer: str, module: str, *names: str) -> list[Import]:
    return [Import(importer, module, names or ("",), 1, top_level=False)]


def test_the_checks_catch_a_synthetic_violation() -> None:
    """The checkers themselves, on imports no module makes (so that an empty list above means something)."""
    through_root = _synthetic("prooflane.status.tracker", ROOT_MODULE, "Engine")
    assert [line.split(" imports ")[1] for line in upward_imports(through_root)] == [
        "prooflane (the package root)",
        "prooflane.engine.engine (engine)",
    ]
    error_through_root = _synthetic("prooflane.status.tracker", ROOT_MODULE, "ProoflaneError")
    assert len(upward_imports(error_through_root)) == 1  # the root itself stands above status
    assert upward_imports(_synthetic("prooflane.status.tracker", "prooflane.errors", "Invalid")) == []
    downward_but_forbidden = [
        *_synthetic("prooflane.status.tracker", "prooflane.devices.backend", "Device"),
        *_synthetic("prooflane.server.api", "prooflane.groth16"),
        *_synthetic("prooflane.fleet.view", ROOT_MODULE, "Engine"),  # allowed by rank, not by its part
        *_synthetic("prooflane.engine.admission", "fastapi", "HTTPException"),
    ]
    assert upward_imports(downward_but_forbidden) == []
    found = forbidden_imports(downward_but_forbidden, FORBIDDEN)
    assert [line.split(":")[0] for line in found] == [
        "prooflane.status.tracker",
        "prooflane.server.api",
        "prooflane.fleet.view",
        "prooflane.engine.admission",
    ]
    groth16_above_itself = _synthetic("prooflane.groth16.prover", "prooflane.errors", "Invalid")
    assert len(forbidden_imports(groth16_above_itself, FORBIDDEN)) == 1  # upward too: both checks say so
    assert (
        forbidden_imports(_synthetic("prooflane.groth16.prover", "prooflane.groth16.formats"), FORBIDDEN)
        == []
    )


def test_no_module_takes_a_private_name_of_another_part() -> None:
    private = []
    for imp in all_imports():
        mine = part_of(imp.importer)
        for module, name in _targets(imp):
            theirs = part_of(module)
            if theirs is None or theirs == mine or module == "prooflane._version":
                continue
            inner = module.split(".")[1:]
            if any(piece.startswith("_") for piece in inner) or (
                name.startswith("_") and name != "__version__"
            ):
                private.append(f"{imp.importer}:{imp.line} takes {module}{'.' + name if name else ''}")
    assert private == []


def test_no_import_circle_at_module_level() -> None:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for imp in all_imports():
        if imp.top_level:
            for module, _ in _targets(imp):
                if module in MODULES and module != imp.importer:
                    graph[imp.importer].add(module)
    # A package's face imports its own modules, and importing a module runs its package's face first:
    # only circles through modules that are not faces of their own importers count.
    circles = [c for c in _strongly_connected(graph) if len(c) > 1 and not _only_faces(c)]
    assert circles == []


def _only_faces(circle: list[str]) -> bool:
    faces = [m for m in circle if MODULES[m].name == "__init__.py"]
    return bool(faces) and all(any(m.startswith(f + ".") for f in faces) for m in circle if m not in faces)


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def _sources() -> list[str]:
    return sorted({str(p.relative_to(PACKAGE)) for pattern in SOURCES for p in PACKAGE.rglob(pattern)})


def test_the_line_limit_counts_c_headers_and_javascript() -> None:
    kinds = {Path(source).suffix for source in _sources()}
    assert kinds >= {".py", ".pyi", ".c", ".h", ".js"}


@pytest.mark.parametrize("source", _sources())
def test_every_source_file_is_under_the_line_limit(source: str) -> None:
    lines = len((PACKAGE / source).read_text().splitlines())
    assert lines < MAX_LINES, f"{source}: {lines} lines"


@pytest.mark.parametrize(  # the package root loads names on first use (``__getattr__``): not a face's shape
    "face", sorted(p for p in PARTS if p in MODULES and MODULES[p].name == "__init__.py" and p != ROOT_MODULE)
)
def test_a_face_holds_its_docstring_imports_and_all_only(face: str) -> None:
    tree = ast.parse(MODULES[face].read_text())
    assert ast.get_docstring(tree), f"{face} says what the part holds"
    for node in tree.body[1:]:
        is_all = isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["__all__"]
        assert isinstance(node, ast.Import | ast.ImportFrom) or is_all, f"{face}:{node.lineno}"


def _definitions(pattern: str) -> list[str]:
    """Where in the package a line matches ``pattern`` (module:line)."""
    found = []
    for module, path in MODULES.items():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(pattern, line):
                found.append(f"{module}:{number}")
    return found


@pytest.mark.parametrize(
    ("rule", "pattern", "home"),
    [
        ("the daemon's default port", r"\b9821\b", "prooflane.config"),
        ("the fleet's default port", r"\b9830\b", "prooflane.fleet.config"),
        ("the metrics content type", r"version=0\.0\.4", "prooflane.server.metrics"),
        ("the SSE heartbeat", r"^\s*HEARTBEAT_SECS\s*=", "prooflane.server.sse"),
        ("the request timeout", r"request_timeout\w*: float = \d", "prooflane.config"),
        ("the live-view retention", r"retention_secs: float = \d", "prooflane.config"),
        ("the Ray settings", r"^class RaySettings\b", "prooflane.config"),
        ("the refusal status codes", r"^REFUSAL_STATUS\b", "prooflane.server.errors"),
        ("the bearer check", r"compare_digest", "prooflane.server.auth"),
        ("the HTTP server (the daemon's and the fleet's)", r"uvicorn\.Config\(", "prooflane.server.limits"),
        ("the middleware both apps run behind", r"add_middleware\(", "prooflane.server.guard"),
        (
            "which backend runs",
            r"(?<!class )\b(Ray|Process)Backend(\.from_config)?\(",
            "prooflane.devices.choose",
        ),
        ("the device section's bases", r"\(\"a\", \"b1\", \"c\", \"h\"\)", "prooflane.groth16.prover"),
        ("the process role names", r"\"prooflane-(prove|final|synth)\"", "prooflane.devices.roles"),
        ("the event types", r"^EVENT_TYPES\b", "prooflane.events"),
    ],
)
def test_each_rule_has_one_home(rule: str, pattern: str, home: str) -> None:
    found = _definitions(pattern)
    assert found, f"{rule}: not found at all"
    assert {f.split(":")[0] for f in found} == {home}, f"{rule} is defined in {found}"


def test_the_engine_raises_refusals_never_http_codes() -> None:
    """No module below the server chooses an HTTP status: the refusal classes do, mapped in one place."""
    for module, path in MODULES.items():
        placed = part_of(module)
        if placed is None or placed[1] in ("server", "fleet", "cli", "testing"):
            continue
        text = path.read_text()
        assert not re.search(r"Refused\([^)]*\b(4\d\d|5\d\d)\)", text), module
        assert "HTTPException" not in text, module


def test_a_test_s_lane_is_its_folder() -> None:
    from tests.conftest import lane_of

    tests = Path(__file__).parent
    assert lane_of(tests / "e2e" / "test_daemon.py") == "slow"
    assert lane_of(tests / "engine" / "test_pipeline.py") == "engine"
    assert lane_of(tests / "groth16" / "cuda" / "test_msm.py") == "engine"
    assert lane_of(tests / "groth16" / "test_prover.py") is None  # the unit lane: make check
    assert lane_of(tests / "e2e_like" / "test_x.py") is None  # a folder, not a prefix of a name
    marked = [
        path.relative_to(tests).as_posix()
        for path in tests.rglob("test_*.py")
        if lane_of(path) is None and re.search(r"mark\.(slow|engine)\b", path.read_text())
    ]
    assert marked == []  # collection refuses them too; this names them all at once
