"""The proof kinds (names, partition counts, priorities) and the inputs of one partition."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..circuits.profiles import POREP_C2, SNAP_UPDATE, WINDOW_POST, WINNING_POST
from ..states import Priority

__all__ = [
    "BUILTIN_KINDS",
    "CIRCOM",
    "CIRCOM_SPEC",
    "CircomInput",
    "KindSpec",
    "StorageInput",
    "SynthesisTask",
    "kind_spec",
    "reservation_bytes",
    "witness_memory_bytes",
]

CIRCOM = "circom"


@dataclass(frozen=True)
class KindSpec:
    """A proof kind: ``partitions`` per job (0 for circom: one per witness given) and its priority."""

    name: str
    partitions: int
    priority: Priority
    description: str


BUILTIN_KINDS: tuple[KindSpec, ...] = (
    KindSpec(
        POREP_C2, 10, Priority.NORMAL, "Replica encoding and inclusion of challenged leaves (PoRep C2)."
    ),
    KindSpec(SNAP_UPDATE, 16, Priority.NORMAL, "Re-encoding of an updated sector (SnapDeals)."),
    KindSpec(WINDOW_POST, 1, Priority.HIGH, "Inclusion of challenged leaves; one partition per request."),
    KindSpec(WINNING_POST, 1, Priority.CRITICAL, "Inclusion of a few challenged leaves, for block winning."),
)
_SPECS = {k.name: k for k in BUILTIN_KINDS}
CIRCOM_SPEC = KindSpec(CIRCOM, 0, Priority.NORMAL, "A registered circom circuit; one partition per witness.")


def kind_spec(name: str) -> KindSpec | None:
    """The spec of kind ``name``, or None when there is no such kind."""
    return CIRCOM_SPEC if name == CIRCOM else _SPECS.get(name)


@dataclass(frozen=True)
class StorageInput:
    """Inputs of one partition of a built-in kind."""

    kind: str
    profile: str
    curve: str
    sector: str
    randomness: bytes


@dataclass(frozen=True)
class CircomInput:
    """Inputs of one partition of a circom job: a .wtns path, or circuit inputs for the ``wasm`` generator."""

    witness: str | dict[str, Any]
    wasm: str | None

    @property
    def computed(self) -> bool:
        """Whether the witness is computed from circuit inputs (by the circuit's generator)."""
        return isinstance(self.witness, dict)


WITNESS_MEMORY_BASE = 64 << 20
WITNESS_MEMORY_PER_WIRE = 1024
"""The automatic ``witness_memory_bytes``: circomlib's SHA-256(512) generator holds 16.6 MiB for 62,417
wires (about 280 bytes a wire), so 1 KiB a wire leaves it 3.6 times its need, and the base covers a
small circuit's runtime."""


def witness_memory_bytes(wires: int, configured: int) -> int:
    """The WebAssembly memory a witness generator of a ``wires``-wire circuit may use for one partition:
    ``configured`` (``witness_memory_bytes``), or where that is 0, the base and 1 KiB a wire."""
    return configured or WITNESS_MEMORY_BASE + WITNESS_MEMORY_PER_WIRE * wires


def reservation_bytes(
    partition_bytes: int, wires: int, inputs: StorageInput | CircomInput, configured: int
) -> int:
    """A partition's reservation: its estimate (``CircuitMeta.partition_bytes``), and where its witness is
    computed from circuit inputs, the memory its generator may use."""
    computed = isinstance(inputs, CircomInput) and inputs.computed
    return partition_bytes + (witness_memory_bytes(wires, configured) if computed else 0)


@dataclass(frozen=True)
class SynthesisTask:
    """What the synthesis pool needs for one partition."""

    job_id: str
    partition: int
    key_path: str
    inputs: StorageInput | CircomInput
    key_cache_bytes: int = 256 << 20
    """How much of the circom keys a synthesis process keeps read (``synthesis_key_cache_bytes``)."""
    witness_memory_bytes: int = 64 << 20
    """The WebAssembly memory its witness generator may use (:func:`witness_memory_bytes`)."""
