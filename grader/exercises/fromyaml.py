"""A rubric's YAML into the typed objects of schema.py, key by key.

Every key is converted to the type its field declares (a dataclass, a list, a mapping, one of
a few words, true or false, an integer, a finite number, a text or an expression); an unknown
key, a key given twice, a wrong type or a missing required key raises RubricError naming the
file, the dotted key and its line. key_line finds a key's line again for the checks made on
the rubric as a whole (semantics.py). Imports only core.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from pathlib import Path
from typing import Any, Literal

import yaml

from grader.core.errors import RubricError
from grader.core.exprs import Expr, ExprError
from grader.core.typed import type_hints

# libyaml's safe loader where PyYAML has it (ten times faster: every submit reads the rubrics)
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _plain_float(text: str) -> float | str:
    """An unquoted scalar that Python reads as a number (1e-5, 2E3; 1e999 and nan too, which the
    caller refuses as not finite), else the text as it was."""
    try:
        return float(text)
    except ValueError:
        return text


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def build(cls: type, node: yaml.Node, prefix: str, path: str) -> Any:
    """The dataclass cls from a YAML mapping, each key converted to its field's type."""
    if not isinstance(node, yaml.MappingNode):
        raise RubricError(path, prefix or "<top>", "expected a mapping of keys", _line(node))
    fields = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("internal")}
    hints = type_hints(cls)
    values: dict[str, Any] = {}
    seen: dict[str, int] = {}
    for key_node, value_node in node.value:
        key = key_node.value
        dotted = f"{prefix}.{key}" if prefix else key
        if key in seen:
            raise RubricError(path, dotted, f"given twice (first on line {seen[key]}): keep one", _line(key_node))
        seen[key] = _line(key_node)
        if key not in fields:
            known = ", ".join(sorted(fields))
            raise RubricError(path, dotted, f"unknown key (known here: {known})", _line(key_node))
        values[key] = convert(hints[key], value_node, dotted, path)
    for name, f in fields.items():
        if name not in values and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            dotted = f"{prefix}.{name}" if prefix else name
            raise RubricError(path, dotted, f"missing (required: {f.metadata['doc']})", _line(node))
    return cls(**values)


def convert(tp: Any, node: yaml.Node, dotted: str, path: str) -> Any:
    """A YAML node as the type tp: a dataclass, a list, a mapping or a choice here, a scalar in _scalar."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType) and set(typing.get_args(tp)) == {Expr, str}:
        # an argument: an expression where the text is one, else a tensor's name as written (`in`);
        # what is neither is named by the rubric's checks
        try:
            return Expr(node.value) if isinstance(node, yaml.ScalarNode) else convert(str, node, dotted, path)
        except ExprError:
            return node.value
    if dataclasses.is_dataclass(tp):
        return build(tp, node, dotted, path)
    if origin is list:
        if not isinstance(node, yaml.SequenceNode):
            raise RubricError(path, dotted, "expected a list", _line(node))
        (item,) = typing.get_args(tp)
        return [convert(item, n, f"{dotted}[{i}]", path) for i, n in enumerate(node.value)]
    if origin is dict:
        if not isinstance(node, yaml.MappingNode):
            raise RubricError(path, dotted, "expected a mapping", _line(node))
        _, vt = typing.get_args(tp)
        return {k.value: convert(vt, v, f"{dotted}.{k.value}", path) for k, v in node.value}
    if origin is Literal:
        choices = typing.get_args(tp)
        if not isinstance(node, yaml.ScalarNode) or node.value not in choices:
            raise RubricError(path, dotted, f"expected one of {', '.join(choices)}", _line(node))
        return node.value
    return _scalar(tp, node, dotted, path)


def _scalar(tp: Any, node: yaml.Node, dotted: str, path: str) -> Any:
    """A YAML scalar as true or false, an integer, a finite number, a text or an expression."""
    if not isinstance(node, yaml.ScalarNode):
        got = "list" if isinstance(node, yaml.SequenceNode) else "mapping"
        raise RubricError(path, dotted, f"expected a {tp.__name__}, got a {got}", _line(node))
    try:
        value = yaml.load(node.value, Loader=LOADER) if not node.style else node.value  # noqa: S506 - a safe loader
    except ValueError:                               # an integer past Python's 4300 digits
        raise RubricError(path, dotted, f"a number of {len(node.value)} characters, past any limit", _line(node)) from None
    if tp is bool:
        if not isinstance(value, bool):
            raise RubricError(path, dotted, f"expected true or false, got {node.value!r}", _line(node))
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise RubricError(path, dotted, f"expected an integer, got {node.value!r}", _line(node))
        return value
    if tp is float:
        return _finite(value, node, dotted, path)
    if tp is str:
        return node.value
    if tp is Expr:                                   # parsed here, once: every step gets the tree
        try:
            return Expr(node.value)
        except ExprError as exc:
            raise RubricError(path, dotted, str(exc), _line(node)) from None
    raise RubricError(path, dotted, f"unsupported type {tp}", _line(node))  # pragma: no cover - schema bug


def _finite(value: Any, node: yaml.ScalarNode, dotted: str, path: str) -> float:
    """A float key's value (YAML's reading of the scalar) as a finite number."""
    if isinstance(value, str) and not node.style:
        value = _plain_float(value)          # YAML 1.1 reads 1e-5 (no dot) as text; a person means a number
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RubricError(path, dotted, f"expected a number, got {node.value!r}", _line(node))
    # Every float key is a tolerance, a scale, a fraction, a threshold, a limit or points: NaN
    # compares false with everything and infinity passes or fails every kernel (`rtol: .nan`
    # failed every check of a correct kernel), so neither is a value any of them can take.
    try:
        number = float(value)
    except OverflowError:                        # an integer of 400 digits
        number = math.inf if value > 0 else -math.inf
    if not math.isfinite(number):
        raise RubricError(path, dotted, f"expected a finite number, got {node.value!r} ("
                                        f"{'not a number' if number != number else 'infinite'})", _line(node))
    return number


def key_line(path: str, key: str) -> int | None:
    """The line of a dotted key (`kernel.grid`, `checks.cases[0]`) in the rubric's YAML, read again
    only for the error that names it; None where it is not written there (a default)."""
    try:
        node = yaml.compose(Path(path).read_text())
    except (OSError, yaml.YAMLError):
        return None
    line = None
    for part in key.split("."):
        m = re.fullmatch(r"([^\[]+)((?:\[\d+\])*)", part)
        if node is None or m is None or not isinstance(node, yaml.MappingNode):
            return line
        found = next(((k, v) for k, v in node.value if k.value == m.group(1)), None)
        if found is None:
            return line
        line, node = found[0].start_mark.line + 1, found[1]
        for index in re.findall(r"\[(\d+)\]", m.group(2)):
            if not isinstance(node, yaml.SequenceNode) or int(index) >= len(node.value):
                return line
            node = node.value[int(index)]
            line = node.start_mark.line + 1
    return line
