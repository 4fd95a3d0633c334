"""One JSON encoder for the frozen views: it walks dataclasses, so no view writes its fields out by hand.

The rules: a dataclass becomes an object whose keys are its fields in declaration order; an enum becomes its
value; a mapping becomes an object; a tuple or list becomes an array; str, int, float, bool and None stay as
they are. Field metadata changes that:

- ``metadata=NOT_JSON``: the field is not part of the document (a cache, say);
- ``metadata=json_text_in("attr")``: the field's JSON text may already be held in the field ``attr`` (a
  ``str | None``); :func:`to_json_text` then splices that text in instead of encoding the field again;
- ``metadata=VARIES`` on a run of consecutive scalar fields, with one field ``metadata=JSON_FRAME``: that
  field may hold the object's JSON text around the varying fields' values, as made by :func:`json_frame`;
  :func:`to_json_text` then writes the frame's pieces with the values between them. A view whose fields
  mostly stay the same while a few (times since something) change at every read is then encoded with a
  few number conversions instead of a walk over all its fields.

A value of a class with ``write_json(out)`` and ``json_value()`` (:class:`SelfEncoding`) encodes itself:
the first appends its JSON text to ``out`` in pieces, the second gives it as plain JSON types.

How each field is converted is worked out once per class, from its type hints, so encoding a view costs a
dict built in C plus the conversions its non-scalar fields need.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import operator
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = [
    "JSON_FRAME",
    "NOT_JSON",
    "VARIES",
    "SelfEncoding",
    "json_frame",
    "json_text_in",
    "number_text",
    "to_json",
    "to_json_text",
]

_SKIP = "prooflane.json.skip"
_TEXT_IN = "prooflane.json.text_in"
_VARIES = "prooflane.json.varies"
_FRAME = "prooflane.json.frame"

NOT_JSON: Mapping[str, Any] = types.MappingProxyType({_SKIP: True})
"""Field metadata: leave the field out of the JSON document."""

VARIES: Mapping[str, Any] = types.MappingProxyType({_VARIES: True})
"""Field metadata: a scalar that changes at every read while the other fields stay (see ``JSON_FRAME``)."""

JSON_FRAME: Mapping[str, Any] = types.MappingProxyType({_SKIP: True, _FRAME: True})
"""Field metadata: not in the document; may hold :func:`json_frame` of the object (a ``tuple[str, ...]`` or
None), which :func:`to_json_text` then writes around the ``VARIES`` fields' current values."""


@typing.runtime_checkable
class SelfEncoding(typing.Protocol):
    """A value that writes its own JSON: ``write_json`` appends its text in pieces, ``json_value`` gives it
    as plain JSON types (the two must agree)."""

    def write_json(self, out: list[str]) -> None: ...

    def json_value(self) -> Any: ...


def json_text_in(attr: str) -> Mapping[str, Any]:
    """Field metadata: the field's JSON text may be cached in the field ``attr`` (None when it is not)."""
    return types.MappingProxyType({_TEXT_IN: attr})


def json_frame(value: Any) -> tuple[str, ...]:
    """The JSON text of dataclass ``value`` around the values of its ``VARIES`` fields: one piece more than
    there are such fields, their keys included.

    Joining the pieces with the varying values' JSON (:func:`number_text`) between them gives
    ``to_json_text(value)``; keep the frame in the field marked ``JSON_FRAME`` of a value whose other fields
    are the same, and only the varying ones are encoded.
    """
    return _plan(type(value)).frame(value)


def to_json(value: Any) -> Any:
    """``value`` as plain JSON types (fresh dicts and lists), by the rules in this module's docstring."""
    return _convert(value)


def to_json_text(value: Any) -> str:
    """``value`` as compact JSON text; equal to ``json.dumps(to_json(value))`` with cached texts reused."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        plan = _plan(type(value))
        if plan.plain:
            return _dumps(plan.dumpable(value))
    elif isinstance(value, tuple | list) and value and dataclasses.is_dataclass(value[0]):
        plan = _plan(type(value[0]))
        if plan.plain:
            return _dumps([plan.dumpable(v) for v in value])
    else:
        return _dumps(_convert(value))
    # Pieces of text joined once at the end: a large document is copied once, not once per level.
    out: list[str] = []
    if isinstance(value, tuple | list):
        _write_items(plan, value, out)
    else:
        plan.write(value, out)
    return "".join(out)


Convert = Callable[[Any], Any]
Write = Callable[[Any, list[str]], None]


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

    def write(self, value: Any, out: list[str]) -> None:
        """Append ``"name":value,...`` (no braces)."""
        out.append(_dumps(self.dumpable(value))[1:-1])


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
        self.key = _dumps(name) + ":"
        self.run = _Run((name,), hints)
        self.self_encoding = _self_encoding(hints[name])

    def write(self, value: Any, out: list[str]) -> None:
        """Append ``"name":value`` from the cached text, the items' own texts, or an encoding."""
        if self.self_encoding:
            out.append(self.key)
            field_value = getattr(value, self.name)
            if field_value is None:
                out.append("null")
            else:
                field_value.write_json(out)
            return
        text = getattr(value, self.cache) if self.cache is not None else None
        if text is not None:
            out.append(self.key)
            out.append(text)
        elif self.items is not None:
            out.append(self.key)
            _write_items(self.items, getattr(value, self.name), out)
        else:
            self.run.write(value, out)


class _Plan:
    """How to encode one dataclass, worked out once from its fields' metadata and type hints."""

    def __init__(self, cls: type) -> None:
        hints = typing.get_type_hints(cls)
        every = dataclasses.fields(cls)
        fields = [f for f in every if not f.metadata.get(_SKIP)]
        self.whole = _Run(tuple(f.name for f in fields), hints)
        # For text: runs of fields encoded with one json.dumps, and the cached fields between them.
        self.segments = _segments(fields, hints)
        frames = [f.name for f in every if f.metadata.get(_FRAME)]
        self.frame_attr = frames[0] if frames else None
        varies = [i for i, f in enumerate(fields) if f.metadata.get(_VARIES)]
        if self.frame_attr is not None:
            if not varies or varies != list(range(varies[0], varies[-1] + 1)):
                raise TypeError(f"{cls.__name__}: a JSON frame needs one run of consecutive VARIES fields")
            if any(_converter(hints[fields[i].name], True) is not None for i in varies):
                raise TypeError(f"{cls.__name__}: VARIES fields must be scalars")
            self.before = _segments(fields[: varies[0]], hints)
            self.after = _segments(fields[varies[-1] + 1 :], hints)
            names = [fields[i].name for i in varies]
            # The varying fields' keys, each but the first after a comma: '"a":', ',"b":'
            self.varies = tuple(("," if n else "") + _dumps(name) + ":" for n, name in enumerate(names))
            getter = operator.attrgetter(*names)
            self.varying: Callable[[Any], Any] = getter if len(names) > 1 else lambda v: (getter(v),)
        self.plain = self.frame_attr is None and all(isinstance(s, _Run) for s in self.segments)

        self.convert = self.whole.convert
        self.dumpable = self.whole.dumpable

    def write(self, value: Any, out: list[str]) -> None:
        """Append the object's JSON text to ``out`` in pieces."""
        if self.frame_attr is not None:
            frame = getattr(value, self.frame_attr)
            if frame is not None:
                out.append(frame[0])
                for n, item in enumerate(self.varying(value), 1):
                    out.append(number_text(item))
                    out.append(frame[n])
                return
        if self.plain:
            out.append(_dumps(self.dumpable(value)))
            return
        out.append("{")
        _write_segments(self.segments, value, out, ",")
        out.append("}")

    def frame(self, value: Any) -> tuple[str, ...]:
        if self.frame_attr is None:
            raise TypeError(f"{type(value).__name__} has no field marked JSON_FRAME")
        before = ["{"]
        if self.before:
            _write_segments(self.before, value, before, ",")
            before.append(",")
        after: list[str] = []
        if self.after:
            after.append(",")
            _write_segments(self.after, value, after, ",")
        after.append("}")
        # Piece n ends with the key of varying field n: its value goes right after it.
        return ("".join(before) + self.varies[0], *self.varies[1:], "".join(after))


def _write_segments(segments: list[_Run | _Cached], value: Any, out: list[str], comma: str) -> None:
    for n, segment in enumerate(segments):
        if n:
            out.append(comma)
        segment.write(value, out)


def _write_items(plan: _Plan, items: Any, out: list[str]) -> None:
    """Append a JSON array of dataclass ``items`` that ``plan`` encodes."""
    out.append("[")
    for n, item in enumerate(items):
        if n:
            out.append(",")
        plan.write(item, out)
    out.append("]")


def _segments(fields: Sequence[dataclasses.Field[Any]], hints: Mapping[str, Any]) -> list[_Run | _Cached]:
    """Runs of fields encoded with one json.dumps, and the fields with cached text between them."""
    segments: list[_Run | _Cached] = []
    run: list[str] = []
    for f in fields:
        items = _cached_items(hints[f.name])
        if _TEXT_IN in f.metadata or items is not None or _self_encoding(hints[f.name]):
            if run:
                segments.append(_Run(tuple(run), hints))
                run = []
            segments.append(_Cached(f.name, f.metadata.get(_TEXT_IN), items, hints))
        else:
            run.append(f.name)
    if run:
        segments.append(_Run(tuple(run), hints))
    return segments


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
    if _self_encoding(hint):
        return operator.methodcaller("json_value")
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


def _self_encoding(hint: Any) -> bool:
    """Whether values of type ``hint`` (or ``hint | None``) write their own JSON."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) in (types.UnionType, typing.Union) and len(args) == 1:
        hint = args[0]
    return isinstance(hint, type) and not dataclasses.is_dataclass(hint) and issubclass(hint, SelfEncoding)


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
    if isinstance(value, SelfEncoding):
        return value.json_value()
    if isinstance(value, Mapping):
        return {k: _convert(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_convert(v) for v in value]
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def number_text(value: Any) -> str:
    """``json.dumps(value)`` for a scalar, without its call overhead for the common numbers."""
    kind = type(value)
    if kind is float and math.isfinite(value):
        return float.__repr__(value)  # what json writes for a finite float
    if kind is int:
        return int.__repr__(value)
    return _dumps(value)
