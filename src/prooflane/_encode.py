"""One JSON encoder for the frozen views: it walks dataclasses, so no view writes its fields out by hand.

The rules: a dataclass becomes an object whose keys are its fields in declaration order; an enum becomes its
value; a mapping becomes an object; a tuple or list becomes an array; str, int, float, bool and None stay as
they are. Two kinds of field metadata change that:

- ``metadata=NOT_JSON``: the field is not part of the document (a cache, say);
- ``metadata=json_text_in("attr")``: the field's JSON text may already be held in the field ``attr`` (a
  ``str | None``); :func:`to_json_text` then splices that text in instead of encoding the field again.

How each field is converted is worked out once per class, from its type hints, so encoding a view costs a
dict built in C plus the conversions its non-scalar fields need.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import operator
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["NOT_JSON", "json_text_in", "to_json", "to_json_text"]

_SKIP = "prooflane.json.skip"
_TEXT_IN = "prooflane.json.text_in"

NOT_JSON: Mapping[str, Any] = types.MappingProxyType({_SKIP: True})
"""Field metadata: leave the field out of the JSON document."""


def json_text_in(attr: str) -> Mapping[str, Any]:
    """Field metadata: the field's JSON text may be cached in the field ``attr`` (None when it is not)."""
    return types.MappingProxyType({_TEXT_IN: attr})


def to_json(value: Any) -> Any:
    """``value`` as plain JSON types (fresh dicts and lists), by the rules in this module's docstring."""
    return _convert(value)


def to_json_text(value: Any) -> str:
    """``value`` as compact JSON text; equal to ``json.dumps(to_json(value))`` with cached texts reused."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _plan(type(value)).text(value)
    if isinstance(value, tuple | list) and value and dataclasses.is_dataclass(value[0]):
        plan = _plan(type(value[0]))
        if plan.plain:
            return _dumps([plan.dumpable(v) for v in value])
        return f"[{','.join(plan.text(v) for v in value)}]"
    return _dumps(_convert(value))


Convert = Callable[[Any], Any]


class _Run:
    """Fields encoded together: their names, one getter for all of them, and the conversions they need.

    :meth:`convert` gives plain JSON types; :meth:`dumpable` only what ``json.dumps`` needs (it writes enums
    of ``str`` as their value and tuples as arrays already), which is most of the cost saved.
    """

    def __init__(self, names: tuple[str, ...], hints: Mapping[str, Any]) -> None:
        self.names = names
        getter = operator.attrgetter(*names)
        values: Callable[[Any], Any] = getter if len(names) > 1 else lambda v: (getter(v),)
        converts = tuple((n, c) for n in names if (c := _converter(hints[n], False)) is not None)
        dumps = tuple((n, c) for n in names if (c := _converter(hints[n], True)) is not None)
        self.convert: Convert = _builder(names, values, converts)
        self.dumpable: Convert = _builder(names, values, dumps)


def _builder(
    names: tuple[str, ...], values: Callable[[Any], Any], converts: tuple[tuple[str, Convert], ...]
) -> Convert:
    """A function from an instance to its dict: built once per class, as this runs for every view."""

    def build(value: Any) -> dict[str, Any]:
        return dict(zip(names, values(value)))  # noqa: B905 (one getter gives every name)

    if not converts:
        return build

    def build_and_convert(value: Any) -> dict[str, Any]:
        doc = dict(zip(names, values(value)))  # noqa: B905
        for name, convert in converts:
            item = doc[name]
            if item is not None:
                doc[name] = convert(item)
        return doc

    return build_and_convert


class _Cached:
    """A field whose text may be cached in another field, or whose items cache their own text."""

    def __init__(self, name: str, cache: str | None, items: _Plan | None, hints: Mapping[str, Any]) -> None:
        self.name, self.cache, self.items = name, cache, items
        self.run = _Run((name,), hints)

    def text(self, value: Any) -> str:
        text = getattr(value, self.cache) if self.cache is not None else None
        if text is None and self.items is not None:
            items = self.items
            text = f"[{','.join(items.text(v) for v in getattr(value, self.name))}]"
        if text is None:
            return _dumps(self.run.dumpable(value))[1:-1]
        return f'"{self.name}":{text}'


class _Plan:
    """How to encode one dataclass, worked out once from its fields' metadata and type hints."""

    def __init__(self, cls: type) -> None:
        hints = typing.get_type_hints(cls)
        fields = [f for f in dataclasses.fields(cls) if not f.metadata.get(_SKIP)]
        self.whole = _Run(tuple(f.name for f in fields), hints)
        # For text: runs of fields encoded with one json.dumps, and the cached fields between them.
        self.segments: list[_Run | _Cached] = []
        run: list[str] = []
        for f in fields:
            items = _cached_items(hints[f.name])
            if _TEXT_IN in f.metadata or items is not None:
                if run:
                    self.segments.append(_Run(tuple(run), hints))
                    run = []
                self.segments.append(_Cached(f.name, f.metadata.get(_TEXT_IN), items, hints))
            else:
                run.append(f.name)
        if run:
            self.segments.append(_Run(tuple(run), hints))
        self.plain = all(isinstance(s, _Run) for s in self.segments)

        self.convert = self.whole.convert
        self.dumpable = self.whole.dumpable

    def text(self, value: Any) -> str:
        if self.plain:
            return _dumps(self.whole.dumpable(value))
        parts = [
            _dumps(s.dumpable(value))[1:-1] if isinstance(s, _Run) else s.text(value) for s in self.segments
        ]
        return "{" + ",".join(parts) + "}"


_PLANS: dict[type, _Plan] = {}


def _plan(cls: type) -> _Plan:
    plan = _PLANS.get(cls)
    if plan is None:
        plan = _PLANS[cls] = _Plan(cls)
    return plan


_SCALARS = (str, int, float, bool, type(None))


def _converter(hint: Any, dumps: bool) -> Convert | None:
    """How to make a value of type ``hint`` plain JSON (``dumps``: only what ``json.dumps`` cannot write
    itself); None when nothing is to be done (a scalar; for ``dumps`` also a str enum or a tuple of them)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        converters = [c for a in args if (c := _converter(a, dumps)) is not None]
        if not converters:
            return None
        return converters[0] if len(converters) == 1 else _convert
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return None if dumps and issubclass(hint, str) else operator.attrgetter("value")
    if isinstance(hint, type) and issubclass(hint, _SCALARS):
        return None
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _plan(hint).dumpable if dumps else _plan(hint).convert
    if origin in (tuple, list) or (isinstance(origin, type) and issubclass(origin, Sequence)):
        item = _converter(args[0], dumps) if args else _convert
        if item is None:
            return None if dumps else list
        return _each(item)
    if isinstance(origin, type) and issubclass(origin, Mapping):
        item = _converter(args[1], dumps) if len(args) == 2 else _convert
        return dict if item is None else _values(item)
    if hint is typing.Any:
        return _convert
    if getattr(hint, "__supertype__", None) is not None:  # a NewType
        return _converter(hint.__supertype__, dumps)
    return _convert


def _each(item: Convert) -> Convert:
    return lambda v: [item(x) for x in v]


def _values(item: Convert) -> Convert:
    return lambda v: {k: item(x) for k, x in v.items()}


def _cached_items(hint: Any) -> _Plan | None:
    """The plan of the items of a tuple of dataclasses that cache JSON text, so their text is reused."""
    if typing.get_origin(hint) not in (tuple, list):
        return None
    args = typing.get_args(hint)
    if not args or not (isinstance(args[0], type) and dataclasses.is_dataclass(args[0])):
        return None
    plan = _plan(args[0])
    return None if plan.plain else plan


def _convert(value: Any) -> Any:
    """The conversion decided from the value itself (for fields typed ``Any`` or with mixed unions)."""
    if isinstance(value, _SCALARS) and not isinstance(value, enum.Enum):
        return value
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _plan(type(value)).convert(value)
    if isinstance(value, Mapping):
        return {k: _convert(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_convert(v) for v in value]
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))
