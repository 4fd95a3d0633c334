"""The one JSON encoder of the frozen views: field order, enums, mappings, tuples, skipped and cached text."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from types import MappingProxyType

import pytest

from prooflane.status.encode import (
    JSON_FRAME,
    NOT_JSON,
    VARIES,
    json_frame,
    json_text_in,
    to_json,
    to_json_text,
)


class Colour(StrEnum):
    RED = "red"


class Size(Enum):
    BIG = 3


@dataclass(frozen=True, slots=True)
class Leaf:
    name: str
    colour: Colour
    size: Size | None


@dataclass(frozen=True, slots=True)
class Branch:
    zeta: int
    leaves: tuple[Leaf, ...]
    counts: Mapping[str, int]
    alpha: float | None
    cache: str | None = field(default=None, metadata=NOT_JSON)


@dataclass(frozen=True, slots=True)
class Tree:
    name: str
    branches: tuple[Branch, ...] = field(kw_only=True, metadata=json_text_in("branches_text"))
    branches_text: str | None = field(default=None, metadata=NOT_JSON)


LEAF = Leaf("a", Colour.RED, Size.BIG)
BRANCH = Branch(2, (LEAF, Leaf("b", Colour.RED, None)), MappingProxyType({"x": 1}), None, cache="not shown")


def test_fields_in_declaration_order_with_enums_mappings_and_tuples_made_plain() -> None:
    doc = to_json(BRANCH)
    assert list(doc) == ["zeta", "leaves", "counts", "alpha"]
    assert doc == {
        "zeta": 2,
        "leaves": [{"name": "a", "colour": "red", "size": 3}, {"name": "b", "colour": "red", "size": None}],
        "counts": {"x": 1},
        "alpha": None,
    }
    assert type(doc["leaves"]) is list and type(doc["counts"]) is dict
    assert type(doc["leaves"][0]["colour"]) is str


def test_text_is_the_compact_json_of_the_plain_document() -> None:
    tree = Tree("t", branches=(BRANCH, BRANCH))
    assert to_json_text(tree) == json.dumps(to_json(tree), separators=(",", ":"))
    assert to_json_text((LEAF, LEAF)) == json.dumps([to_json(LEAF)] * 2, separators=(",", ":"))


def test_cached_text_is_spliced_in_as_it_is() -> None:
    tree = Tree("t", branches=(BRANCH,), branches_text='["cached"]')
    assert to_json_text(tree) == '{"name":"t","branches":["cached"]}'
    assert to_json(tree)["branches"][0]["zeta"] == 2  # the document itself never reads the cache


def test_a_value_it_cannot_encode_is_refused() -> None:
    with pytest.raises(TypeError, match="set"):
        to_json({"a": {1, 2}})


@dataclass(frozen=True, slots=True)
class Timed:
    name: str
    colour: Colour
    age: float = field(metadata=VARIES)
    left: int | None = field(metadata=VARIES)
    branches: tuple[Branch, ...] = field(metadata=json_text_in("branches_text"))
    branches_text: str | None = field(default=None, metadata=NOT_JSON)
    frame: tuple[str, ...] | None = field(default=None, metadata=JSON_FRAME)


def test_a_frame_holds_the_text_around_the_varying_fields() -> None:
    plain = Timed("t", Colour.RED, 1.5, 3, (BRANCH,))
    frame = json_frame(plain)
    before, between, after = frame
    assert (before, between) == ('{"name":"t","colour":"red","age":', ',"left":')
    assert after.startswith(',"branches":[{"zeta":2,') and after.endswith("]}")
    for age, left in [(2.25, None), (float("nan"), 7), (1e300, -1), (0.1 + 0.2, 0)]:
        framed = dataclasses.replace(plain, age=age, left=left, frame=frame)
        expected = json.dumps(to_json(framed), separators=(",", ":"))
        assert to_json_text(framed) == expected == to_json_text(dataclasses.replace(framed, frame=None))
        assert to_json_text((framed, framed)) == f"[{expected},{expected}]"


def test_the_frame_is_spliced_in_as_it_is() -> None:
    framed = Timed("t", Colour.RED, 1.0, 2, (), frame=("{<", "|", ">}"))
    assert to_json_text(framed) == "{<1.0|2>}"


def test_a_frame_needs_one_run_of_scalar_varying_fields() -> None:
    @dataclass(frozen=True)
    class Apart:
        a: float = field(metadata=VARIES)
        b: str
        c: float = field(metadata=VARIES)
        frame: tuple[str, ...] | None = field(default=None, metadata=JSON_FRAME)

    @dataclass(frozen=True)
    class Nested:
        a: Leaf = field(metadata=VARIES)
        frame: tuple[str, ...] | None = field(default=None, metadata=JSON_FRAME)

    with pytest.raises(TypeError, match="consecutive"):
        json_frame(Apart(1.0, "x", 2.0))
    with pytest.raises(TypeError, match="scalars"):
        json_frame(Nested(LEAF))
    with pytest.raises(TypeError, match="JSON_FRAME"):
        json_frame(LEAF)


class Shouted:
    """Writes its own JSON (the encoder's SelfEncoding protocol)."""

    def __init__(self, word: str) -> None:
        self.word = word

    def write_json(self, out: list[str]) -> None:
        out.append(json.dumps(self.word.upper()))

    def json_value(self) -> str:
        return self.word.upper()


@dataclass(frozen=True, slots=True)
class Speech:
    first: Shouted
    maybe: Shouted | None
    after: int


def test_a_value_that_encodes_itself_is_asked_for_its_json() -> None:
    speech = Speech(Shouted("hi"), None, 3)
    assert to_json(speech) == {"first": "HI", "maybe": None, "after": 3}
    assert to_json_text(speech) == '{"first":"HI","maybe":null,"after":3}'
    assert to_json({"x": Shouted("a")}) == {"x": "A"}
