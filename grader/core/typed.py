"""Small typed objects back from their JSON (dataclasses.asdict) form: a result.json read back,
the child's job. One reader for every dataclass that crosses a file or a process boundary."""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from enum import Enum
from typing import Any


def doc_field(text: str, **kw: Any) -> Any:
    """A dataclass field with its description (metadata "doc"), for the typed configurations whose
    every key says what it does: the rubric's schema, a grade's and a class's request."""
    return dataclasses.field(metadata={"doc": text}, **kw)


@functools.cache
def type_hints(cls: type) -> dict[str, Any]:
    """cls's resolved annotations, worked out once a class (typing.get_type_hints evaluates
    every string annotation again at each call, and a rubric or a result holds dozens)."""
    return typing.get_type_hints(cls)


def from_data(cls: type, data: Any) -> Any:
    """A dataclass (and the dataclasses inside it) from its asdict() form."""
    hints = type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        kwargs[f.name] = _value(hints[f.name], data[f.name])
    return cls(**kwargs)


def _value(tp: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return _value(inner[0], value) if len(inner) == 1 else value
    if origin is list:
        (item,) = typing.get_args(tp)
        return [_value(item, v) for v in value]
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:          # tuple[X, ...]: each item an X
            return tuple(_value(args[0], v) for v in value)
        if args and len(args) == len(value):                # tuple[A, B]: each item its own type
            return tuple(_value(a, v) for a, v in zip(args, value))
        return tuple(value)
    if dataclasses.is_dataclass(tp):
        return from_data(tp, value)
    if isinstance(tp, type) and issubclass(tp, Enum):
        return tp(value)
    return value
