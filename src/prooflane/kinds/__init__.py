"""Proof kinds: names, partition counts, priorities, memory estimates, and how a partition's inputs are built.

Built-in kinds keep the names, partition counts and priorities of Filecoin's proofs (as Curio's proving
engine names them) on prooflane's own storage-proof circuits, at the size of the configured profile; they
are not Filecoin chain proofs. The ``circom`` kind proves registered circom circuits.

Holds the proof kinds and a partition's inputs (:mod:`.spec`), what the engine knows of a prepared circuit
and its key, with the memory estimate (:mod:`.meta`), the circom ``.wasm`` reader (:mod:`.wasm`), a .wtns
file's header and size bound (:mod:`.wtns`), the node process that computes circom witnesses
(:mod:`.witness_helper`) and the synthesis entry point run in worker processes (:mod:`.synthesis`).

May import: the foundation (``errors``, ``files``), ``circuits``, ``groth16`` and the leaves below it
(``states``). See docs/architecture.md.
"""

from .meta import CircuitMeta, inspect_zkey, prepare_builtin
from .spec import (
    BUILTIN_KINDS,
    CIRCOM,
    CIRCOM_SPEC,
    CircomInput,
    KindSpec,
    StorageInput,
    SynthesisTask,
    kind_spec,
    reservation_bytes,
    witness_memory_bytes,
)
from .synthesis import synthesize_partition
from .wasm import WitnessGenerator, inspect_wasm
from .wtns import WTNS_HEADER_BYTES, WTNS_VERSION, wtns_limit, wtns_version, wtns_wires

__all__ = [
    "BUILTIN_KINDS",
    "CIRCOM",
    "CIRCOM_SPEC",
    "WTNS_HEADER_BYTES",
    "WTNS_VERSION",
    "CircomInput",
    "CircuitMeta",
    "KindSpec",
    "StorageInput",
    "SynthesisTask",
    "WitnessGenerator",
    "inspect_wasm",
    "inspect_zkey",
    "kind_spec",
    "prepare_builtin",
    "reservation_bytes",
    "synthesize_partition",
    "witness_memory_bytes",
    "wtns_limit",
    "wtns_version",
    "wtns_wires",
]
