"""prooflane's exceptions: every one survives a trip through pickle (pool and worker processes send them)."""

from __future__ import annotations

import importlib
import inspect
import pickle
import pkgutil
from typing import Any

import pytest

import prooflane
from prooflane.errors import FormatError, ProoflaneError

SAMPLE_ARGS: dict[str, Any] = {
    "name": "bits",
    "index": 7,
    "detail": "a detail",
    "path": "/data/circuit.zkey",
    "problem": "wrong magic",
    "status": 422,
}


def _every_error() -> list[type[ProoflaneError]]:
    for module in pkgutil.walk_packages(prooflane.__path__, "prooflane."):
        if not module.name.startswith("prooflane.devices.ray"):  # an optional extra
            importlib.import_module(module.name)
    found: list[type[ProoflaneError]] = []
    todo: list[type[ProoflaneError]] = [ProoflaneError]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return sorted(set(found), key=lambda c: f"{c.__module__}.{c.__qualname__}")


def _instance(cls: type[ProoflaneError]) -> ProoflaneError:
    if "__init__" not in {name for c in cls.__mro__ if issubclass(c, ProoflaneError) for name in vars(c)}:
        return cls("a message")
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    args = [SAMPLE_ARGS.get(p.name, "a message") for p in params if p.default is p.empty]
    return cls(*args)


ERRORS = _every_error()


def test_every_module_error_is_found() -> None:
    names = {cls.__name__ for cls in ERRORS}
    assert {
        "FormatError",
        "Refused",
        "NotFound",
        "StorageFull",
        "UnsatisfiedConstraint",
        "DaemonError",
        "RemoteError",
    } <= names


@pytest.mark.parametrize("cls", ERRORS, ids=lambda c: c.__name__)
def test_error_pickles_with_its_message_and_fields(cls: type[ProoflaneError]) -> None:
    error = _instance(cls)
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is cls
    assert str(back) == str(error)
    assert vars(back) == vars(error)


def test_format_error_keeps_path_and_problem_through_pickle() -> None:
    back = pickle.loads(pickle.dumps(FormatError("/x.zkey", "truncated section 2")))
    assert isinstance(back, FormatError)
    assert (back.path, back.problem) == ("/x.zkey", "truncated section 2")
    assert str(back) == "/x.zkey: truncated section 2"
