"""A wheel of the prooflane this fleet runs, made from its own installed files, to deploy on other hosts.

The wheel is written from the package folder the fleet imported (``prooflane/``, every file but byte code)
and the installed distribution's metadata (its ``Requires-Dist`` lines, so pip brings the dependencies,
and its entry points, so the host gets the ``prooflane`` script). It needs no build backend, no source
tree and no network: the fleet deploys exactly the code it runs, whether prooflane was installed from a
wheel or as an editable checkout. Its version is ``VERSION+CONTENT`` (a local version label: the first 12
hex digits of a SHA-256 over the files), so a host that already holds the same code is left as it is and
one that holds other code under the same version number is upgraded.

The package folder holds the C extension built for this machine (``_curvemath.cpython-3XX-<arch>.so``):
a host whose Python or platform differs does not load it (the name says which interpreter it is for) and
proves on the libraries, which pip installs there as for any host.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import zipfile
from pathlib import Path

from .._version import __version__

__all__ = ["PACKAGE", "build_wheel", "wheel_version"]

PACKAGE = Path(__file__).resolve().parents[1]
"""The folder of the running prooflane package."""
_WHEEL = "Wheel-Version: 1.0\nGenerator: prooflane fleet\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
_ENTRY_POINTS = "[console_scripts]\nprooflane = prooflane.cli:main\n"


def _files() -> list[Path]:
    return sorted(
        p for p in PACKAGE.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")
    )  # fmt: skip


def wheel_version() -> str:
    """``VERSION+CONTENT``: the running version and a digest of the package's files (names and bytes)."""
    digest = hashlib.sha256()
    for path in _files():
        digest.update(path.relative_to(PACKAGE).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return f"{__version__}+{digest.hexdigest()[:12]}"


def _metadata(version: str) -> str:
    """The installed distribution's METADATA with ``version``; a minimal one when it cannot be read."""
    try:
        text = importlib.metadata.distribution("prooflane").read_text("METADATA") or ""
    except importlib.metadata.PackageNotFoundError:
        text = ""
    if not text:
        return f"Metadata-Version: 2.1\nName: prooflane\nVersion: {version}\n"
    head, sep, body = text.partition("\n\n")
    lines = [f"Version: {version}" if line.startswith("Version:") else line for line in head.splitlines()]
    return "\n".join(lines) + "\n" + sep.lstrip("\n") + body if sep else "\n".join(lines) + "\n"


def _entry_points() -> str:
    try:
        return importlib.metadata.distribution("prooflane").read_text("entry_points.txt") or _ENTRY_POINTS
    except importlib.metadata.PackageNotFoundError:
        return _ENTRY_POINTS


def build_wheel(folder: Path) -> Path:
    """Write ``prooflane-VERSION-py3-none-any.whl`` into ``folder`` and return its path."""
    version = wheel_version()
    info = f"prooflane-{version}.dist-info"
    path = Path(folder) / f"prooflane-{version}-py3-none-any.whl"
    record: list[str] = []
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as wheel:

        def add(name: str, data: bytes) -> None:
            wheel.writestr(name, data)
            hashed = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{name},sha256={hashed},{len(data)}")

        for file in _files():
            add(f"prooflane/{file.relative_to(PACKAGE).as_posix()}", file.read_bytes())
        add(f"{info}/METADATA", _metadata(version).encode())
        add(f"{info}/WHEEL", _WHEEL.encode())
        add(f"{info}/entry_points.txt", _entry_points().encode())
        add(f"{info}/top_level.txt", b"prooflane\n")
        record.append(f"{info}/RECORD,,")
        wheel.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return path
