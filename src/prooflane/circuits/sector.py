"""Sectors on disk: a file of 32-byte leaves, its replica encodings and their Poseidon Merkle trees.

A sector folder holds:

- ``data.bin``: the sector's data, ``size_bytes`` bytes; leaf ``i`` is bytes ``32 i .. 32 i + 31`` read as a
  little-endian integer below 2^253 (the top three bits of each leaf are zero, so a leaf is an element of
  both curves' scalar fields).
- ``tree-<curve>-d.bin``, ``tree-<curve>-r.bin``, ``tree-<curve>-u.bin``: every level (leaves first, 32
  bytes per node) of the Merkle trees over the data, the replica and the updated replica. Replica leaf
  ``i`` is ``data_i + Poseidon(replica_id, i)`` and updated-replica leaf ``i`` is
  ``data_i + Poseidon(update_key, i)`` (mod the curve's scalar field). Trees for a curve are built when the
  sector is made (BN254) or when first asked for (another curve).
- ``meta.json``: format, version, sector id, size, leaf count, replica id, update key, and per curve the
  roots ``comm_d`` (data), ``comm_r`` (replica) and ``comm_r_update`` (updated replica) as decimal strings.

A sector folder may be named by a request, so its files are read as untrusted: each must be a regular file
(a symlink, a FIFO, a device or a folder in its place is refused, never followed or waited on), of the
size ``meta.json`` gives it (``meta.json`` itself at most ``MAX_META_BYTES``), and is read with that limit.
``open`` checks all of that before it reads the data; an expected size (``size_bytes``) is checked against
``meta.json`` before anything else is read.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import secrets
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..errors import SectorError, StorageFull
from ..files import FileRefused, describe_mode, open_regular, read_limited
from ..groth16 import BN128, Curve, curve_by_name
from .merkle import MerkleTree
from .poseidon import poseidon_many
from .profiles import LEAF_BYTES

FULL = (errno.ENOSPC, errno.EDQUOT)
"""A disk with no room left (for the data, or for this user): the disk's fault, not the request's (507)."""

__all__ = ["FORMAT", "MAX_META_BYTES", "TREES", "Sector", "SectorRoots", "WrongSectorSize", "create_sector"]

FORMAT = "prooflane-sector"
VERSION = 1
TREES = ("d", "r", "u")  # data, replica, updated replica
_LEAF_BITS = 253
MAX_META_BYTES = 16 << 10
"""The largest ``meta.json`` read (one written by ``create`` holds about 1 KiB with both curves' roots)."""


class WrongSectorSize(SectorError):
    """Raised when a sector opened for a given size holds another (before its data is read)."""

    def __init__(self, folder: str, size_bytes: int, expected: int) -> None:
        self.folder, self.size_bytes, self.expected = folder, size_bytes, expected
        super().__init__(f"{folder}: holds {size_bytes} bytes, expected {expected}")

    def __reduce__(self) -> tuple[type[WrongSectorSize], tuple[str, int, int]]:
        return type(self), (self.folder, self.size_bytes, self.expected)


@dataclass(frozen=True)
class SectorRoots:
    """The commitments of one sector on one curve."""

    comm_d: int
    comm_r: int
    comm_r_update: int


class Sector:
    """An opened sector folder (see the module docstring for its files)."""

    def __init__(self, path: Path, meta: dict[str, Any]) -> None:
        self.path = path
        self._meta = meta
        self.sector_id: int = meta["sector_id"]
        self.size_bytes: int = meta["size_bytes"]
        self.leaf_count: int = meta["leaf_count"]
        self.replica_id: int = int(meta["replica_id"], 16)
        self.update_key: int = int(meta["update_key"], 16)
        self._data: NDArray[np.uint8] | None = None
        self._trees: dict[tuple[str, str], MerkleTree] = {}

    def __repr__(self) -> str:
        return f"Sector({str(self.path)!r}, id={self.sector_id}, size={self.size_bytes})"

    @property
    def depth(self) -> int:
        """Levels of the sector's trees."""
        return self.leaf_count.bit_length() - 1

    @property
    def comm_d(self) -> int:
        """Root of the data tree on BN254."""
        return self.roots(BN128).comm_d

    @property
    def comm_r(self) -> int:
        """Root of the replica tree on BN254."""
        return self.roots(BN128).comm_r

    @property
    def comm_r_update(self) -> int:
        """Root of the updated-replica tree on BN254."""
        return self.roots(BN128).comm_r_update

    # Making and opening.

    @classmethod
    def create(
        cls,
        path: str | Path,
        size_bytes: int,
        seed: int | bytes | str | None = None,
        sector_id: int | None = None,
    ) -> Sector:
        """Write a new sector of ``size_bytes`` pseudo-random bytes (deterministic for a given ``seed``).

        ``size_bytes`` must be a power of two, at least 64. The sector id defaults to one derived from the
        seed. Builds the BN254 trees and writes ``meta.json`` last.
        """
        if size_bytes < 2 * LEAF_BYTES or size_bytes & (size_bytes - 1):
            raise SectorError(f"sector size {size_bytes}: expected a power of two of at least 64 bytes")
        seed_bytes = _seed_bytes(seed)
        folder = Path(path)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            if exc.errno in FULL:
                raise StorageFull(f"{folder}: cannot make the sector folder ({exc.strerror})") from None
            raise SectorError(f"{folder}: cannot make the sector folder ({exc.strerror or exc})") from None
        if (folder / "meta.json").exists():
            raise SectorError(f"{folder}: a sector already exists here")
        rng = np.random.default_rng(list(hashlib.sha256(b"prooflane/sector/data" + seed_bytes).digest()))
        data = rng.integers(0, 256, size=size_bytes, dtype=np.uint8)
        data.reshape(-1, LEAF_BYTES)[:, -1] &= 0xFF >> (8 * LEAF_BYTES - _LEAF_BITS)
        _atomic_write(folder / "data.bin", data.tobytes())
        if sector_id is None:
            sector_id = int.from_bytes(
                hashlib.sha256(b"prooflane/sector/id" + seed_bytes).digest()[:6], "little"
            )
        meta = {
            "format": FORMAT,
            "version": VERSION,
            "sector_id": sector_id,
            "size_bytes": size_bytes,
            "leaf_bytes": LEAF_BYTES,
            "leaf_count": size_bytes // LEAF_BYTES,
            "replica_id": hex(_derive(b"replica", seed_bytes, sector_id)),
            "update_key": hex(_derive(b"update", seed_bytes, sector_id)),
            "roots": {},
        }
        sector = cls(folder, meta)
        sector._data = data
        sector.roots(BN128)  # builds the trees and writes meta.json
        return sector

    @classmethod
    def open(cls, path: str | Path, *, size_bytes: int | None = None) -> Sector:
        """Open a sector folder written by ``Sector.create`` (or ``prooflane sector new``).

        With ``size_bytes``, a sector of another size is refused (SectorError) before its data is read.
        Every file must be a regular file of its expected size (see the module docstring).
        """
        folder = Path(path)
        meta_path = folder / "meta.json"
        try:
            info = os.stat(folder)
        except OSError as exc:
            raise SectorError(f"{folder}: no such sector folder ({exc.strerror or exc})") from None
        if not stat.S_ISDIR(info.st_mode):
            raise SectorError(f"{folder}: {describe_mode(info.st_mode)}, expected a sector folder")
        try:
            meta = json.loads(read_limited(meta_path, MAX_META_BYTES, "sector file"))
        except FileRefused as exc:
            if not meta_path.exists() and not meta_path.is_symlink():
                raise SectorError(f"{meta_path}: no such file (is {folder} a sector folder?)") from None
            raise SectorError(str(exc)) from None
        except ValueError as exc:
            raise SectorError(f"{meta_path}: cannot be read as JSON ({exc})") from None
        _check_meta(meta_path, meta)
        if size_bytes is not None and meta["size_bytes"] != size_bytes:
            raise WrongSectorSize(str(folder), meta["size_bytes"], size_bytes)
        sector = cls(folder, meta)
        sector._check_tree_files()
        sector._load_data()
        return sector

    # Leaves, trees, roots.

    def data_leaf(self, index: int) -> int:
        """Leaf ``index`` of the data."""
        data = self._load_data()
        return int.from_bytes(data[index * LEAF_BYTES : (index + 1) * LEAF_BYTES].tobytes(), "little")

    def data_leaves(self) -> list[int]:
        """Every data leaf."""
        raw = self._load_data().tobytes()
        return [int.from_bytes(raw[i : i + LEAF_BYTES], "little") for i in range(0, len(raw), LEAF_BYTES)]

    def encoding_keys(self, key: int, curve: Curve = BN128) -> list[int]:
        """``Poseidon(key, i)`` for every leaf index ``i``: the per-leaf keys of an encoding."""
        return poseidon_many([[key] * self.leaf_count, list(range(self.leaf_count))], curve)

    def tree(self, which: str, curve: Curve = BN128) -> MerkleTree:
        """The data (``"d"``), replica (``"r"``) or updated-replica (``"u"``) tree on ``curve``."""
        if which not in TREES:
            raise SectorError(f"unknown tree {which!r}: expected one of {', '.join(TREES)}")
        cached = self._trees.get((curve.name, which))
        if cached is not None:
            return cached
        self.roots(curve)
        path = self._tree_path(curve, which)
        want = self._tree_bytes
        try:
            fd, size = open_regular(path, want, "sector file")
        except FileRefused as exc:
            raise SectorError(str(exc)) from None
        try:
            if size != want:
                raise SectorError(f"{path}: {size} bytes, expected {want}")
            with os.fdopen(os.dup(fd), "rb") as file:
                raw = np.memmap(file, dtype=np.uint8, mode="r")
        except (OSError, ValueError) as exc:
            raise SectorError(f"{path}: cannot be read ({exc})") from None
        finally:
            os.close(fd)
        tree = MerkleTree.from_bytes(raw, self.leaf_count, curve)
        self._trees[(curve.name, which)] = tree
        return tree

    def roots(self, curve: Curve = BN128) -> SectorRoots:
        """The three roots on ``curve``, building and saving that curve's trees the first time."""
        stored = self._meta["roots"].get(curve.name)
        if stored is None or not all(os.path.lexists(self._tree_path(curve, w)) for w in TREES):
            stored = self._build_trees(curve)
        return SectorRoots(int(stored["comm_d"]), int(stored["comm_r"]), int(stored["comm_r_update"]))

    def _build_trees(self, curve: Curve) -> dict[str, str]:
        data = [x % curve.r for x in self.data_leaves()]
        built = {"d": MerkleTree.build(data, curve)}
        for which, key in (("r", self.replica_id), ("u", self.update_key)):
            keys = self.encoding_keys(key, curve)
            built[which] = MerkleTree.build(
                [(d + k) % curve.r for d, k in zip(data, keys, strict=True)], curve
            )
        for which, tree in built.items():
            _atomic_write(self._tree_path(curve, which), tree.to_bytes())
            self._trees[(curve.name, which)] = tree
        stored = {
            "comm_d": str(built["d"].root),
            "comm_r": str(built["r"].root),
            "comm_r_update": str(built["u"].root),
        }
        self._meta["roots"][curve.name] = stored
        _atomic_write(self.path / "meta.json", (json.dumps(self._meta, indent=2) + "\n").encode())
        return stored

    def _tree_path(self, curve: Curve, which: str) -> Path:
        return self.path / f"tree-{curve.name}-{which}.bin"

    @property
    def _tree_bytes(self) -> int:
        return (2 * self.leaf_count - 1) * LEAF_BYTES

    def _check_tree_files(self) -> None:
        """Every tree file present is a regular file of its size (without opening it); missing ones are
        built when first asked for."""
        for name in self._meta["roots"]:
            for which in TREES:
                path = self.path / f"tree-{name}-{which}.bin"
                try:
                    info = os.lstat(path)
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    raise SectorError(f"{path}: cannot be read ({exc.strerror or exc})") from None
                if not stat.S_ISREG(info.st_mode):
                    raise SectorError(f"{path}: {describe_mode(info.st_mode)}, expected a regular file")
                if info.st_size != self._tree_bytes:
                    raise SectorError(f"{path}: {info.st_size} bytes, expected {self._tree_bytes}")

    def _load_data(self) -> NDArray[np.uint8]:
        if self._data is None:
            path = self.path / "data.bin"
            try:
                raw = bytearray(read_limited(path, self.size_bytes, "sector file", exact=True))
            except FileRefused as exc:
                raise SectorError(str(exc)) from None
            data = np.frombuffer(raw, dtype=np.uint8)
            high = data.reshape(-1, LEAF_BYTES)[:, -1] >> (_LEAF_BITS - 8 * (LEAF_BYTES - 1))
            bad = np.flatnonzero(high)
            if bad.size:
                raise SectorError(f"{path}: leaf {int(bad[0])} is not below 2^{_LEAF_BITS}")
            self._data = data
        return self._data

    def describe(self, curve: Curve = BN128) -> dict[str, Any]:
        """A JSON-ready summary: id, size, leaves and the roots on ``curve``."""
        roots = self.roots(curve)
        return {
            "path": str(self.path),
            "sector_id": self.sector_id,
            "size_bytes": self.size_bytes,
            "leaf_count": self.leaf_count,
            "curve": curve.name,
            "comm_d": str(roots.comm_d),
            "comm_r": str(roots.comm_r),
            "comm_r_update": str(roots.comm_r_update),
        }


def create_sector(path: str, size_bytes: int, seed: bytes | None) -> int:
    """``Sector.create`` for a process pool: makes the sector (its BN254 trees included) and returns only
    its size, so that nothing large crosses back. A failed create leaves no folder behind."""
    folder = Path(path)
    existed = folder.exists()
    try:
        return Sector.create(folder, size_bytes, seed=seed).size_bytes
    except BaseException:
        if not existed:
            shutil.rmtree(folder, ignore_errors=True)
        raise


def _seed_bytes(seed: int | bytes | str | None) -> bytes:
    if seed is None:
        return secrets.token_bytes(32)
    if isinstance(seed, bytes):
        return seed
    if isinstance(seed, int):
        return seed.to_bytes(max(1, (seed.bit_length() + 7) // 8), "little", signed=False)
    return seed.encode()


def _derive(tag: bytes, seed: bytes, sector_id: int) -> int:
    digest = hashlib.sha256(b"prooflane/sector/" + tag + sector_id.to_bytes(8, "little") + seed).digest()
    return int.from_bytes(digest, "little") >> (256 - _LEAF_BITS)


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        # A file of its own, created here: never through a symlink someone left at the temporary name.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        problem = f"{path}: cannot be written ({exc.strerror or exc})"
        raise (StorageFull if exc.errno in FULL else SectorError)(problem) from None  # a full disk: 507


def _check_meta(path: Path, meta: Any) -> None:
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise SectorError(f"{path}: not a prooflane sector (field 'format' must be {FORMAT!r})")
    if meta.get("version") != VERSION:
        raise SectorError(f"{path}: field 'version' is {meta.get('version')!r}: expected {VERSION}")
    for key in ("sector_id", "size_bytes", "leaf_count"):
        if not isinstance(meta.get(key), int) or meta[key] < 0:
            raise SectorError(f"{path}: field {key!r} must be a non-negative integer")
    for key in ("replica_id", "update_key"):
        value = meta.get(key)
        if not isinstance(value, str) or not value.startswith("0x"):
            raise SectorError(f"{path}: field {key!r} must be a hex string")
    if meta["leaf_count"] * LEAF_BYTES != meta["size_bytes"]:
        raise SectorError(f"{path}: leaf_count x {LEAF_BYTES} does not equal size_bytes")
    count = meta["leaf_count"]
    if count < 2 or count & (count - 1):
        raise SectorError(f"{path}: field 'leaf_count' must be a power of two, at least 2")
    roots = meta.get("roots")
    if not isinstance(roots, dict):
        raise SectorError(f"{path}: field 'roots' must be an object")
    for name, entry in roots.items():
        try:
            curve_by_name(name)
        except ValueError:
            raise SectorError(f"{path}: roots for unknown curve {name!r}") from None
        if not isinstance(entry, dict) or not all(
            isinstance(entry.get(k), str) and entry[k].isdigit()
            for k in ("comm_d", "comm_r", "comm_r_update")
        ):
            raise SectorError(
                f"{path}: roots.{name} must hold comm_d, comm_r, comm_r_update as decimal strings"
            )
