"""The request and response models shared by the engine and the HTTP API (pydantic v2).

These are what leave the engine: every one is frozen, and built from the journal or the engine's own state,
never a live object.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.config import JsonDict

from .states import JobState, PartitionState, Priority

__all__ = [
    "CircuitInfo",
    "CircuitRegistration",
    "InlineSector",
    "JobAccepted",
    "JobProof",
    "JobRequest",
    "JobState",
    "JobView",
    "KindInfo",
    "PartitionProof",
    "PartitionState",
    "PartitionView",
    "Priority",
]

# fullmatch, never `$`: `$` also matches before a final newline, so "a\n" would pass as a different id.
_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_HEX = re.compile(r"(0x)?[0-9a-fA-F]{2,128}")
# The same rules as JSON Schema patterns for /openapi.json (checked by the validators, not by these).
JOB_ID_SCHEMA: JsonDict = {"pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"}
_HEX_SCHEMA: JsonDict = {"pattern": "^(0x)?[0-9a-fA-F]{2,128}$"}


MAX_INPUT_DEPTH = 32
"""How deeply a job's circuit inputs may nest lists and objects (circom signals are arrays of a few dims)."""


def _nesting(value: Any) -> int:
    """How deeply lists and dicts nest in ``value``, measured without recursion (so any depth is safe)."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest > MAX_INPUT_DEPTH:
            break
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return deepest


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class InlineSector(_Frozen):
    """A sector described in the request instead of a folder: the engine creates it in its data folder."""

    size: int = Field(gt=0, description="Sector size in bytes.")
    seed: str | None = Field(
        default=None,
        description="Hex seed of the sector's data; random when absent.",
        json_schema_extra={"pattern": "^(0x)?([0-9a-fA-F]{2})*$"},
    )


class JobRequest(_Frozen):
    """``POST /v1/jobs``: a storage-proof job, or (kind ``circom``) a job on a registered circuit.

    Storage kinds take ``sector`` (a sector folder on the daemon's machine, or an inline spec) and
    ``randomness`` (hex; random when absent). ``circom`` takes ``circuit`` (a registered name) and
    ``witnesses``: one entry per partition, each a path to a ``.wtns`` file on the daemon's machine or, when
    the circuit was registered with a witness generator, an object of circuit inputs.
    """

    kind: str = Field(description="Proof kind, as listed by GET /v1/kinds.")
    sector: str | InlineSector | None = None
    randomness: str | None = Field(
        default=None, description="Hex challenge randomness.", json_schema_extra=_HEX_SCHEMA
    )
    priority: Priority | None = Field(default=None, description="Overrides the kind's priority.")
    job_id: str | None = Field(
        default=None,
        description="Client-chosen id; resubmitting it is idempotent.",
        json_schema_extra=JOB_ID_SCHEMA,
    )
    circuit: str | None = None
    witnesses: list[str | dict[str, Any]] | None = None

    @field_validator("job_id")
    @classmethod
    def _job_id(cls, value: str | None) -> str | None:
        if value is not None and not _JOB_ID.fullmatch(value):
            raise ValueError(
                "job_id: expected 1-64 characters of A-Z a-z 0-9 . _ - starting with a letter or digit"
            )
        return value

    @field_validator("witnesses", mode="before")
    @classmethod
    def _witnesses_shallow(cls, value: Any) -> Any:
        if _nesting(value) > MAX_INPUT_DEPTH:
            raise ValueError(
                f"witnesses: circuit inputs nest lists and objects more than {MAX_INPUT_DEPTH} levels deep"
            )
        return value

    @field_validator("randomness")
    @classmethod
    def _randomness(cls, value: str | None) -> str | None:
        if value is not None and not _HEX.fullmatch(value):
            raise ValueError("randomness: expected 1 to 64 bytes as hex, e.g. '00ff...'")
        return value

    @model_validator(mode="after")
    def _fields_fit_kind(self) -> JobRequest:
        if self.kind == "circom":
            if not self.circuit or not self.witnesses:
                raise ValueError(
                    "kind 'circom' needs 'circuit' (a registered name) and a non-empty 'witnesses'"
                )
            if self.sector is not None:
                raise ValueError("kind 'circom' takes no 'sector'")
        else:
            if self.sector is None:
                raise ValueError(f"kind {self.kind!r} needs 'sector': a sector folder or an inline spec")
            if self.circuit is not None or self.witnesses is not None:
                raise ValueError(f"'circuit' and 'witnesses' are for kind 'circom', not {self.kind!r}")
        return self

    def randomness_bytes(self) -> bytes | None:
        """The randomness as bytes, or None when the request gave none."""
        if self.randomness is None:
            return None
        text = self.randomness.removeprefix("0x")
        return bytes.fromhex(text if len(text) % 2 == 0 else "0" + text)


class JobAccepted(_Frozen):
    """``202`` answer to ``POST /v1/jobs``."""

    job_id: str


class PartitionView(_Frozen):
    """One partition of a job as the engine sees it now."""

    index: int
    state: PartitionState
    attempt: int = Field(description="The current attempt: 1, or more after a worker process died.")
    worker_id: str | None = None
    error: str | None = None


class JobView(_Frozen):
    """``GET /v1/jobs/{id}``: a job's state and its partitions' states."""

    job_id: str
    kind: str
    priority: Priority
    state: JobState
    submitted_at: float = Field(description="Unix time the job was accepted.")
    finished_at: float | None = None
    total_partitions: int
    partitions_done: int
    partitions: list[PartitionView]
    error: str | None = Field(default=None, description="Why the job failed, naming the partition.")
    circuit: str | None = None


class PartitionProof(_Frozen):
    """One partition's proof (snarkjs proof.json) and public signals (decimal strings)."""

    index: int
    proof: dict[str, Any]
    public: list[str]


class JobProof(_Frozen):
    """``GET /v1/jobs/{id}/proof``: every partition's verified proof, in partition order."""

    job_id: str
    kind: str
    partitions: list[PartitionProof]


class KindInfo(_Frozen):
    """``GET /v1/kinds``: one proof kind."""

    name: str
    partitions: int = Field(description="Partitions per job (circom: witnesses per job, shown as 0).")
    priority: Priority
    curve: str
    constraints_per_partition: int
    memory_per_partition_bytes: int = Field(description="Estimated reservation of one partition.")
    proving_key_bytes: int = Field(
        default=0,
        description="Estimated memory of one worker's loaded key (and its fixed-base tables: msm_tables).",
    )
    description: str = ""


class CircuitRegistration(_Frozen):
    """``POST /v1/circuits``: register a circom circuit as a proof target of kind ``circom``.

    ``zkey`` is a snarkjs Groth16 .zkey on the daemon's machine; ``wasm`` (optional) is circom's witness
    generator, which lets jobs pass circuit inputs instead of ready .wtns files.
    """

    name: str = Field(json_schema_extra=JOB_ID_SCHEMA)
    zkey: str
    wasm: str | None = None
    priority: Priority = Priority.NORMAL

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _JOB_ID.fullmatch(value):
            raise ValueError(
                "name: expected 1-64 characters of A-Z a-z 0-9 . _ - starting with a letter or digit"
            )
        return value


class CircuitInfo(_Frozen):
    """A registered circom circuit."""

    name: str
    curve: str
    constraints: int
    public_signals: int
    has_witness_generator: bool
    witness_field_product: str | None = Field(
        default=None,
        description="How the witness generator multiplies field elements in the synthesis processes: "
        "'64-bit limbs (wide arithmetic)' (its product rewritten, 1.5x its speed), or \"the generator's own "
        '(32-bit limbs): <why>"; null without a generator.',
    )
    priority: Priority
    memory_per_partition_bytes: int
    digest: str = Field(
        default="",
        description="SHA-256 (hex) of the circuit's .zkey followed by its .wasm (or by '-' without one): the "
        "same files under the same name are the same circuit (`PUT /v1/circuits/{name}?digest=`).",
    )
