"""Array expressions evaluated: a tree that arrayexprs.parse() checked, run on a case's arrays with
numpy (the verdict's hypotheses call it; the rubric's loader only parses, and imports no numpy).

Each node kind has its method on _Evaluation, each function of arrayexprs.FUNCTIONS its entry in
_FUNCTIONS; every intermediate array is bounded to MAX_GROWTH times the largest given one.
"""

from __future__ import annotations

import ast
from typing import Any, Callable, Mapping

import numpy as np

from grader.exercises import refmath
from grader.exercises.arrayexprs import MAX_GROWTH, ArrayExprError, name_of, parse

_UNARY = {"gelu_erf": refmath.gelu_erf, "gelu_tanh": refmath.gelu_tanh, "erf": refmath.erf, "tanh": np.tanh,
          "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "abs": np.abs, "sin": np.sin, "cos": np.cos}


def _concat(args: list):
    return np.concatenate(np.broadcast_arrays(args[0], args[1]) if len(args) == 2 else (args[0], args[1]),
                          axis=int(args[2]) if len(args) == 3 else -1)


def _interleave(args: list):
    a, b = np.broadcast_arrays(args[0], args[1])
    return np.stack([a, b], axis=-1).reshape(*a.shape[:-1], 2 * a.shape[-1])


# the functions of arrayexprs.FUNCTIONS but the unary ones and arange (which is bounded), on their
# arguments' values
_FUNCTIONS: dict[str, Callable[[list], Any]] = {
    "minimum": lambda args: np.minimum(*args),
    "maximum": lambda args: np.maximum(*args),
    "where": lambda args: np.where(*args),
    "reshape": lambda args: np.reshape(args[0], tuple(int(d) for d in args[1:])),
    "transpose": lambda args: np.transpose(args[0], tuple(int(d) for d in args[1:]) or None),
    "sum": lambda args: np.sum(args[0], axis=int(args[1])),
    "mean": lambda args: np.mean(args[0], axis=int(args[1])),
    "concat": _concat,
    "interleave": _interleave,
    "roll": lambda args: np.roll(args[0], int(args[1]), axis=int(args[2])),
    "flip": lambda args: np.flip(args[0], axis=int(args[1])),
}
_COMPARISONS = {ast.Lt: np.less, ast.LtE: np.less_equal, ast.Gt: np.greater, ast.GtE: np.greater_equal,
                ast.Eq: np.equal, ast.NotEq: np.not_equal}
_ARITHMETIC = {ast.Add: np.add, ast.Sub: np.subtract, ast.Mult: np.multiply, ast.FloorDiv: np.floor_divide,
               ast.Mod: np.mod, ast.Pow: np.power}


class _Evaluation:
    """One expression's evaluation: its text (for messages), its names' values and the bound on
    any intermediate array's elements."""

    def __init__(self, text: str, values: Mapping[str, Any], limit: int):
        self.text, self.values, self.limit = text, values, limit
        self.kinds = {ast.Constant: lambda n: n.value, ast.Name: self.name, ast.UnaryOp: self.unary,
                      ast.Call: self.call, ast.Subscript: self.subscript, ast.Compare: self.compare,
                      ast.Tuple: self.bare_tuple, ast.BinOp: self.binary}

    def ev(self, n: ast.expr):
        return self.kinds[type(n)](n)

    def bounded(self, v):
        if getattr(v, "size", 1) > self.limit:
            raise ArrayExprError(f"{self.text!r}: an intermediate array of {v.size} elements, more than {MAX_GROWTH} "
                                 "times the largest tensor")
        return v

    def name(self, n: ast.Name):
        name = name_of(n)
        if name == "pi":
            return float(np.pi)
        if name not in self.values:
            raise ArrayExprError(f"{self.text!r}: unknown name {name!r} (known: {', '.join(sorted(self.values))})")
        return self.values[name]

    def unary(self, n: ast.UnaryOp):
        v = self.ev(n.operand)
        if isinstance(n.op, ast.USub):
            return -v
        if isinstance(n.op, ast.Invert):
            return np.logical_not(v)
        return v

    def call(self, n: ast.Call):
        fn, args = n.func.id, [self.ev(a) for a in n.args]
        if fn in _UNARY:
            a = np.asarray(args[0], dtype=np.float64)
            return self.bounded(_UNARY[fn](a) if a.ndim else _UNARY[fn](a.reshape(1))[0])
        if fn == "arange":
            count = int(args[0])
            if not 0 <= count <= self.limit:
                raise ArrayExprError(f"{self.text!r}: arange({count})")
            return self.bounded(np.arange(count))
        if fn not in _FUNCTIONS:                  # pragma: no cover - parse() refuses it
            raise ArrayExprError(f"{self.text!r}: unknown function {fn!r}")
        return self.bounded(_FUNCTIONS[fn](args))

    def subscript(self, n: ast.Subscript):
        return self.bounded(np.asarray(self.ev(n.value))[self.index(n.slice)])

    def index(self, n):
        if isinstance(n, ast.Slice):
            return slice(*(None if p is None else self.integer(self.ev(p)) for p in (n.lower, n.upper, n.step)))
        if isinstance(n, ast.Tuple):
            return tuple(self.index(e) for e in n.elts)
        if isinstance(n, ast.Constant) and (n.value is None or n.value is Ellipsis):
            return n.value
        v = self.ev(n)
        return self.integer(v) if np.ndim(v) == 0 else np.asarray(v).astype(np.int64)

    def integer(self, v):
        if isinstance(v, float) and not v.is_integer():
            raise ArrayExprError(f"{self.text!r}: an index of {v}")
        return int(v)

    def compare(self, n: ast.Compare):
        left, out = self.ev(n.left), True
        for op, right_node in zip(n.ops, n.comparators):
            right = self.ev(right_node)
            out = out & _COMPARISONS[type(op)](left, right)
            left = right
        return self.bounded(np.asarray(out))

    def bare_tuple(self, n: ast.Tuple):
        raise ArrayExprError(f"{self.text!r}: a tuple outside a subscript")

    def binary(self, n: ast.BinOp):
        a, b = self.ev(n.left), self.ev(n.right)
        op = type(n.op)
        if op is ast.BitAnd:
            return self.bounded(np.logical_and(a, b))
        if op is ast.BitOr:
            return self.bounded(np.logical_or(a, b))
        if op is ast.Div:
            return self.bounded(np.true_divide(a, b))
        if isinstance(a, int) and isinstance(b, int) and op in (ast.FloorDiv, ast.Mod) and b == 0:
            raise ArrayExprError(f"{self.text!r}: an integer division by zero")
        return self.bounded(_ARITHMETIC[op](a, b))


def evaluate(text: str, values: Mapping[str, Any], *, largest: int | None = None) -> Any:
    """The expression's value (a numpy array or a number) given its names' values; largest: the
    most elements any of them holds (counted here where not given), which bounds what it may make."""
    tree = parse(text)
    if largest is None:
        largest = max([getattr(v, "size", 1) for v in values.values()] + [1])
    try:
        with np.errstate(all="ignore"):
            return _Evaluation(text, values, MAX_GROWTH * largest + 4096).ev(tree)
    except ArrayExprError:
        raise
    except (ArithmeticError, TypeError, ValueError, IndexError, KeyError, RecursionError, MemoryError) as exc:
        raise ArrayExprError(f"{text!r}: {type(exc).__name__}: {exc}") from None
