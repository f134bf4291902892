"""Array expressions: what a rubric's hypotheses (its `hypotheses` key) say a wrong kernel computes.

An expression is numpy arithmetic over the case's named arrays and numbers, written in the
rubric: `gelu_erf(x + bias[arange(rows) % cols][:, None])`. Its names are the exercise's input
tensors (float64), its dimensions and derived values (integers), `answer` (the float64 answer for
the output being diagnosed), the hypotheses' own terms, a variant's fitted parameter, and pi.
Accepted: numbers, names, + - * / // % ** (/ divides as reals: 1 / 2 is 0.5), unary minus, the
comparisons and & | ~ (for where a variant is defined), subscripts (slices, `...`, `None`, arrays
of indices) and the functions in FUNCTIONS. A tensor named as a Python keyword (`in`) is written
as it is. parse() checks the text once (the rubric's loader calls it; nothing here imports numpy
until an expression is evaluated); evaluate() runs it on a case's arrays.
"""

from __future__ import annotations

import ast
import io
import keyword
import tokenize
from functools import lru_cache
from typing import Any, Mapping

MAX_LENGTH = 2000            # characters of one expression
MAX_NODES = 400
MAX_GROWTH = 8               # no intermediate array may hold more than this many times the largest given one

# name -> (fewest, most) positional arguments; what each does is in _call
FUNCTIONS = {
    "gelu_erf": (1, 1), "gelu_tanh": (1, 1), "erf": (1, 1), "tanh": (1, 1), "exp": (1, 1), "log": (1, 1),
    "sqrt": (1, 1), "abs": (1, 1), "sin": (1, 1), "cos": (1, 1),
    "minimum": (2, 2), "maximum": (2, 2), "where": (3, 3),
    "arange": (1, 1), "reshape": (2, 8), "transpose": (1, 8), "sum": (2, 2), "mean": (2, 2),
    "concat": (2, 3), "interleave": (2, 2), "roll": (3, 3), "flip": (2, 2),
}
FUNCTION_DOCS = {
    "gelu_erf": "the exact GELU, 0.5 v (1 + erf(v / sqrt(2))) with the float-rounded constant",
    "gelu_tanh": "the tanh approximation of GELU",
    "erf, tanh, exp, log, sqrt, abs, sin, cos": "element by element",
    "minimum(a, b), maximum(a, b)": "element by element",
    "where(cond, a, b)": "a where cond holds, else b",
    "arange(n)": "the integers 0 .. n-1 (an index: `bias[arange(rows) % cols]`)",
    "reshape(a, d0, d1, ...)": "a's elements in row-major order, in this shape",
    "transpose(a, p0, p1, ...)": "a's axes reordered (no p: reversed)",
    "sum(a, axis), mean(a, axis)": "a reduction along one axis",
    "concat(a, b[, axis])": "a then b along an axis (the last by default)",
    "interleave(a, b)": "a and b alternating along the last axis (a0 b0 a1 b1 ...)",
    "roll(a, shift, axis)": "a shifted by shift places along an axis, wrapping around",
    "flip(a, axis)": "a reversed along an axis",
}
CONSTANTS = ("pi",)

_ALLOWED = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Name, ast.Load, ast.Call, ast.Add, ast.Sub, ast.Mult,
            ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.USub, ast.UAdd, ast.Invert, ast.BitAnd, ast.BitOr,
            ast.Compare, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq, ast.Subscript, ast.Slice, ast.Tuple)
_KEYWORD_PREFIX = "_kw_"


class ArrayExprError(ValueError):
    """An array expression that cannot be parsed or evaluated; the message says why."""


def _renamed(text: str) -> str:
    """The text with a name that is a Python keyword (`in`, a tensor's name) renamed so Python parses it."""
    out = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.NAME and keyword.iskeyword(tok.string) and tok.string not in ("None", "True",
                                                                                                  "False"):
                out.append((tokenize.NAME, _KEYWORD_PREFIX + tok.string))
            else:
                out.append((tok.type, tok.string))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return text
    return tokenize.untokenize(out)


def _name(node: ast.Name) -> str:
    return node.id.removeprefix(_KEYWORD_PREFIX)


@lru_cache(maxsize=512)
def parse(text: str) -> ast.expr:
    """The expression's tree, checked: only the forms the module docstring lists (ArrayExprError otherwise)."""
    text = text.strip()
    if not text:
        raise ArrayExprError("an empty expression")
    if len(text) > MAX_LENGTH:
        raise ArrayExprError(f"{text[:60]!r}...: longer than {MAX_LENGTH} characters")
    try:
        tree = ast.parse(_renamed(text), mode="eval")
    except SyntaxError as exc:
        raise ArrayExprError(f"not an array expression: {text!r} ({exc.msg})") from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise ArrayExprError(f"not an array expression: {text!r} ({type(exc).__name__})") from None
    count = 0
    for node in ast.walk(tree):
        count += 1
        if isinstance(node, ast.Constant):
            if node.value is Ellipsis or node.value is None:
                continue
            if isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
                continue
            raise ArrayExprError(f"{text!r}: {node.value!r} is not a number")
        if not isinstance(node, _ALLOWED):
            raise ArrayExprError(f"{text!r}: {type(node).__name__} is not allowed (numbers, names, + - * / // % **, "
                                 f"comparisons, & | ~, subscripts and the functions {', '.join(FUNCTIONS)})")
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
                raise ArrayExprError(f"{text!r}: unknown function (known: {', '.join(FUNCTIONS)})")
            fewest, most = FUNCTIONS[node.func.id]
            if node.keywords or not fewest <= len(node.args) <= most:
                raise ArrayExprError(f"{text!r}: {node.func.id} takes {fewest}"
                                     + (f" to {most}" if most != fewest else "") + " arguments, by position")
    if count > MAX_NODES:
        raise ArrayExprError(f"{text[:60]!r}...: longer than {MAX_NODES} terms")
    return tree.body


def names(text: str) -> set[str]:
    """The names an expression reads (functions aside)."""
    tree = parse(text)
    calls = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    return {_name(n) for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) not in calls}


def evaluate(text: str, values: Mapping[str, Any], *, largest: int | None = None) -> Any:
    """The expression's value (a numpy array or a number) given its names' values; largest: the
    most elements any of them holds (counted here where not given), which bounds what it may make."""
    import numpy as np

    from grader.exercises import refmath

    tree = parse(text)
    if largest is None:
        largest = max([getattr(v, "size", 1) for v in values.values()] + [1])
    limit = MAX_GROWTH * largest + 4096

    def bounded(v):
        if getattr(v, "size", 1) > limit:
            raise ArrayExprError(f"{text!r}: an intermediate array of {v.size} elements, more than {MAX_GROWTH} "
                                 "times the largest tensor")
        return v

    unary = {"gelu_erf": refmath.gelu_erf, "gelu_tanh": refmath.gelu_tanh, "erf": refmath.erf, "tanh": np.tanh,
             "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "abs": np.abs, "sin": np.sin, "cos": np.cos}

    def call(fn: str, args: list):
        if fn in unary:
            a = np.asarray(args[0], dtype=np.float64)
            return unary[fn](a) if a.ndim else unary[fn](a.reshape(1))[0]
        if fn == "minimum":
            return np.minimum(*args)
        if fn == "maximum":
            return np.maximum(*args)
        if fn == "where":
            return np.where(*args)
        if fn == "arange":
            n = int(args[0])
            if not 0 <= n <= limit:
                raise ArrayExprError(f"{text!r}: arange({n})")
            return np.arange(n)
        if fn == "reshape":
            return np.reshape(args[0], tuple(int(d) for d in args[1:]))
        if fn == "transpose":
            return np.transpose(args[0], tuple(int(d) for d in args[1:]) or None)
        if fn == "sum":
            return np.sum(args[0], axis=int(args[1]))
        if fn == "mean":
            return np.mean(args[0], axis=int(args[1]))
        if fn == "concat":
            return np.concatenate(np.broadcast_arrays(args[0], args[1]) if len(args) == 2 else (args[0], args[1]),
                                  axis=int(args[2]) if len(args) == 3 else -1)
        if fn == "interleave":
            a, b = np.broadcast_arrays(args[0], args[1])
            return np.stack([a, b], axis=-1).reshape(*a.shape[:-1], 2 * a.shape[-1])
        if fn == "roll":
            return np.roll(args[0], int(args[1]), axis=int(args[2]))
        if fn == "flip":
            return np.flip(args[0], axis=int(args[1]))
        raise ArrayExprError(f"{text!r}: unknown function {fn!r}")      # pragma: no cover - parse() refuses it

    def index(n):
        if isinstance(n, ast.Slice):
            return slice(*(None if p is None else _int(ev(p)) for p in (n.lower, n.upper, n.step)))
        if isinstance(n, ast.Tuple):
            return tuple(index(e) for e in n.elts)
        if isinstance(n, ast.Constant) and (n.value is None or n.value is Ellipsis):
            return n.value
        v = ev(n)
        return _int(v) if np.ndim(v) == 0 else np.asarray(v).astype(np.int64)

    def _int(v):
        if isinstance(v, float) and not v.is_integer():
            raise ArrayExprError(f"{text!r}: an index of {v}")
        return int(v)

    def ev(n):
        if isinstance(n, ast.Constant):
            return n.value
        if isinstance(n, ast.Name):
            name = _name(n)
            if name == "pi":
                return float(np.pi)
            if name not in values:
                raise ArrayExprError(f"{text!r}: unknown name {name!r} (known: {', '.join(sorted(values))})")
            return values[name]
        if isinstance(n, ast.UnaryOp):
            v = ev(n.operand)
            if isinstance(n.op, ast.USub):
                return -v
            if isinstance(n.op, ast.Invert):
                return np.logical_not(v)
            return v
        if isinstance(n, ast.Call):
            return bounded(call(n.func.id, [ev(a) for a in n.args]))
        if isinstance(n, ast.Subscript):
            return bounded(np.asarray(ev(n.value))[index(n.slice)])
        if isinstance(n, ast.Compare):
            left, out = ev(n.left), True
            for op, right_node in zip(n.ops, n.comparators):
                right = ev(right_node)
                out = out & {ast.Lt: np.less, ast.LtE: np.less_equal, ast.Gt: np.greater, ast.GtE: np.greater_equal,
                             ast.Eq: np.equal, ast.NotEq: np.not_equal}[type(op)](left, right)
                left = right
            return bounded(np.asarray(out))
        if isinstance(n, ast.Tuple):
            raise ArrayExprError(f"{text!r}: a tuple outside a subscript")
        a, b = ev(n.left), ev(n.right)
        op = type(n.op)
        if op is ast.BitAnd:
            return bounded(np.logical_and(a, b))
        if op is ast.BitOr:
            return bounded(np.logical_or(a, b))
        if op is ast.Div:
            return bounded(np.true_divide(a, b))
        if isinstance(a, int) and isinstance(b, int) and op in (ast.FloorDiv, ast.Mod) and b == 0:
            raise ArrayExprError(f"{text!r}: an integer division by zero")
        fn = {ast.Add: np.add, ast.Sub: np.subtract, ast.Mult: np.multiply, ast.FloorDiv: np.floor_divide,
              ast.Mod: np.mod, ast.Pow: np.power}[op]
        return bounded(fn(a, b))

    try:
        with np.errstate(all="ignore"):
            return ev(tree)
    except ArrayExprError:
        raise
    except (ArithmeticError, TypeError, ValueError, IndexError, KeyError, RecursionError, MemoryError) as exc:
        raise ArrayExprError(f"{text!r}: {type(exc).__name__}: {exc}") from None
