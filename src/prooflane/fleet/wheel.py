"""A wheel of the prooflane this fleet runs, made from its own installed files, to deploy on other hosts.

The wheel is written from the package folder the fleet imported (``prooflane/``, every file but byte code)
and the installed distribution's metadata (its ``Requires-Dist`` lines, so pip brings the dependencies,
and its entry points, so the host gets the ``prooflane`` script). It needs no build backend, no source
tree and no network: the fleet deploys exactly the code it runs, whether prooflane was installed from a
wheel or as an editable checkout. Its version is ``VERSION+CONTENT`` (a local version label: the first 12
hex digits of a SHA-256 over the files), so a host that already holds the same code is left as it is and
one that holds other code under the same version number is upgraded.

The package folder holds the C extension built for this machine (``_curvemath.cpython-3XX-<arch>.so``).
A wheel that carries it is tagged for the interpreter and platform it was built for
(``cp311-cp311-linux_x86_64``: :func:`extension_tag`), so pip refuses it on a host whose Python or platform
differs instead of installing a file that host cannot load; an extension built for another interpreter than
the running one is left out (nothing could load it under that tag). ``build_wheel(..., extension=False)``
is the pure ``py3-none-any`` wheel without it, for such a host: it proves there on the libraries, and the
deploy says so (:mod:`.deploy`).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import sys
import sysconfig
import zipfile
from pathlib import Path

from .._version import __version__

__all__ = ["PACKAGE", "PURE_TAG", "build_wheel", "extension_tag", "wheel_tag", "wheel_version"]

PACKAGE = Path(__file__).resolve().parents[1]
"""The folder of the running prooflane package."""
PURE_TAG = "py3-none-any"
"""The tag of a wheel without compiled files: any Python 3, any platform."""
_ENTRY_POINTS = "[console_scripts]\nprooflane = prooflane.cli:main\n"
_COMPILED = (".so", ".pyd")


def extension_tag() -> str:
    """The wheel tag of an extension built for the running interpreter: ``cp311-cp311-linux_x86_64``
    (CPython's version, its ABI with its flags, and the platform as ``sysconfig`` names it, as setuptools
    tags the wheels it builds)."""
    version = f"{sys.version_info.major}{sys.version_info.minor}"
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"cp{version}-cp{version}{getattr(sys, 'abiflags', '')}-{platform}"


def _compiled(path: Path) -> bool:
    return path.suffix in _COMPILED


def _loadable(path: Path) -> bool:
    """Whether the running interpreter would load this compiled file (its name ends with its suffix)."""
    return path.name.endswith(str(sysconfig.get_config_var("EXT_SUFFIX") or "\0"))


def _files(extension: bool = True) -> list[Path]:
    """The package's files: byte code left out, and compiled files but those of this interpreter (none
    without ``extension``)."""
    return sorted(
        p for p in PACKAGE.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")
        and (not _compiled(p) or (extension and _loadable(p)))
    )  # fmt: skip


def wheel_tag(extension: bool = True) -> str:
    """The tag of the wheel :func:`build_wheel` writes: :func:`extension_tag` when it carries a compiled
    file, else :data:`PURE_TAG`."""
    return extension_tag() if any(_compiled(p) for p in _files(extension)) else PURE_TAG


def _wheel_file(tag: str) -> str:
    purelib = "true" if tag == PURE_TAG else "false"
    return f"Wheel-Version: 1.0\nGenerator: prooflane fleet\nRoot-Is-Purelib: {purelib}\nTag: {tag}\n"


def wheel_version(extension: bool = True) -> str:
    """``VERSION+CONTENT``: the running version and a digest of the wheel's package files (names and
    bytes)."""
    digest = hashlib.sha256()
    for path in _files(extension):
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


def build_wheel(folder: Path, *, extension: bool = True) -> Path:
    """Write ``prooflane-VERSION-TAG.whl`` into ``folder`` and return its path: with the C extension built
    here and tagged for its platform (:func:`wheel_tag`), or with ``extension=False`` the pure wheel."""
    version, tag = wheel_version(extension), wheel_tag(extension)
    info = f"prooflane-{version}.dist-info"
    path = Path(folder) / f"prooflane-{version}-{tag}.whl"
    record: list[str] = []
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as wheel:

        def add(name: str, data: bytes) -> None:
            wheel.writestr(name, data)
            hashed = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{name},sha256={hashed},{len(data)}")

        for file in _files(extension):
            add(f"prooflane/{file.relative_to(PACKAGE).as_posix()}", file.read_bytes())
        add(f"{info}/METADATA", _metadata(version).encode())
        add(f"{info}/WHEEL", _wheel_file(tag).encode())
        add(f"{info}/entry_points.txt", _entry_points().encode())
        add(f"{info}/top_level.txt", b"prooflane\n")
        record.append(f"{info}/RECORD,,")
        wheel.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return path
