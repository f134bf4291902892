"""Arithmetic over an exercise's named dimensions: `(cols + 255) / 256`, `batch * seq * heads`.

An exercise writes its shapes, launch grids, byte models and tolerances as expressions of its
dimensions. The rubric's loader parses each once into an Expr (ast), and they are evaluated with
integers and C's division (`/`
truncates for integers), or in floating point where a tolerance asks for it. Only numbers,
names, + - * / // % **, unary minus, parentheses and min, max, sqrt, ceil_div are accepted.
"""

from __future__ import annotations

import ast
import math
from functools import lru_cache
from typing import Mapping

FUNCTIONS = {"min": min, "max": max, "sqrt": math.sqrt, "ceil_div": lambda a, b: -(-a // b)}

# Bounds on what an expression may compute: a rubric's shapes, grids and byte models are sizes, and
# `9 ** 9 ** 9` would otherwise run for minutes before anything is graded (the rubric's loader
# turns the ExprError into an error naming the file, line and key).
MAX_EXPONENT = 64
MAX_MAGNITUDE = 2 ** 63          # an int64 holds every size a launch or a buffer can have
MAX_NODES = 200
# Bounds on the text, checked before Python's parser sees it: the parser recurses once per bracket
# or sign, and 100,000 unary minus signs ended in a MemoryError (RecursionError on other Pythons)
# instead of the rubric's error. The shipped rubrics' longest expression is 37 characters
# (`2 * 4 * batch * seq * heads * headDim`) and their deepest tree 7 levels; a byte model written
# out in full stays far below both.
MAX_LENGTH = 500                 # characters of one expression
MAX_DEPTH = 32                   # brackets and signs nested in the text, and levels of the parsed tree (the
#                                  evaluator recurses once per level)


class ExprError(ValueError):
    """An expression that cannot be parsed or evaluated; the message says why."""


def _shown(text: str) -> str:
    """The text for a message: its start, where it is long."""
    return repr(text) if len(text) <= 60 else f"{text[:60]!r}... ({len(text)} characters)"


def _nesting(text: str) -> int:
    """How deeply the text nests, read without parsing it: the brackets open at each point plus the
    signs written before a term (`-(-(-x))` is 5), an upper bound on the parser's recursion."""
    signs = [0]                      # signs pending before the current term, at each bracket level
    deepest, before = 0, ""
    for ch in text:
        if ch.isspace():
            continue
        if ch in "([{":
            signs.append(0)
        elif ch in ")]}":
            if len(signs) > 1:
                signs.pop()
        elif ch in "+-~" and (not before or before in "([{,+-*/%~"):
            signs[-1] += 1           # a sign (unary): one more level until its term ends
        elif ch in "+-*/%,":
            signs[-1] = 0            # a binary operator: the signs before the last term are done
        deepest = max(deepest, len(signs) - 1 + sum(signs))
        before = ch
    return deepest


def _depth(tree: ast.AST) -> int:
    """Levels of expression nodes in the tree (without recursing: it is what is being bounded)."""
    deepest, stack = 0, [(tree, 0)]
    while stack:
        node, level = stack.pop()
        level += isinstance(node, ast.expr)
        deepest = max(deepest, level)
        stack.extend((child, level) for child in ast.iter_child_nodes(node))
    return deepest


_ALLOWED = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Name, ast.Load, ast.Call, ast.Add, ast.Sub, ast.Mult, ast.Div,
            ast.FloorDiv, ast.Mod, ast.Pow, ast.USub, ast.UAdd)


def _check_bounds(text: str) -> None:
    """The text's length and nesting, before Python's parser sees it."""
    if len(text) > MAX_LENGTH:
        raise ExprError(f"{_shown(text)}: longer than {MAX_LENGTH} characters; a rubric's expression is a size")
    if _nesting(text) > MAX_DEPTH:
        raise ExprError(f"{_shown(text)}: nested deeper than {MAX_DEPTH} brackets and signs; a rubric's "
                        "expression is a size")


def _check_node(text: str, node: ast.AST) -> None:
    """One node of the tree: an allowed operator, a name, or a number within the bounds."""
    if isinstance(node, _ALLOWED):
        return
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        if abs(node.value) > MAX_MAGNITUDE or node.value != node.value:     # `1e999` is inf to Python
            raise ExprError(f"{_shown(text)}: a number past {MAX_MAGNITUDE:.3g}"
                            + (f" (Python reads it as {node.value})" if node.value in (math.inf, -math.inf) else "")
                            + "; a rubric's expression is a size")
        return
    raise ExprError(f"{text!r}: only numbers, dimension names, + - * / // % **, parentheses and "
                    f"{', '.join(FUNCTIONS)} are allowed")


@lru_cache(maxsize=512)
def _parse(text: str) -> ast.expr:
    text = text.strip()
    _check_bounds(text)
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise ExprError(f"not an arithmetic expression: {_shown(text)} ({exc.msg})") from None
    except (ValueError, RecursionError, MemoryError) as exc:     # a NUL byte; what the bounds above keep out
        raise ExprError(f"not an arithmetic expression: {_shown(text)} ({type(exc).__name__})") from None
    for node in ast.walk(tree):
        _check_node(text, node)
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise ExprError(f"{text[:60]!r}...: longer than {MAX_NODES} terms; a rubric's expression is a size")
    if _depth(tree) > MAX_DEPTH:
        raise ExprError(f"{_shown(text)}: nested deeper than {MAX_DEPTH} levels; a rubric's expression is a size")
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS):
            raise ExprError(f"{text!r}: unknown function (known: {', '.join(FUNCTIONS)})")
    return tree.body


class Expr(str):
    """An expression as a rubric holds it: its text (it is a str: printed, compared and sent as
    its text) and its tree, parsed once when the rubric is loaded. An empty Expr means "none" (an
    untimed chain's byte model) and cannot be evaluated."""

    __slots__ = ("tree",)

    def __new__(cls, text: str | int | float = "") -> "Expr":
        self = super().__new__(cls, str(text).strip())
        self.tree = _parse(self) if self else None       # ExprError names the text
        return self


def _tree(text: str | int | float) -> ast.expr:
    tree = getattr(text, "tree", None)
    if tree is None:
        if isinstance(text, Expr):
            raise ExprError("an empty expression has no value")
        tree = _parse(str(text))
    return tree


def names(text: str | int | float) -> set[str]:
    """The dimension names an expression reads."""
    if not isinstance(text, str) or (isinstance(text, Expr) and not text):
        return set()
    return {n.id for n in ast.walk(_tree(text)) if isinstance(n, ast.Name) and n.id not in FUNCTIONS}


class _Evaluation:
    """One expression evaluated with the dimensions' values: C's integer semantics where integer is
    set, every intermediate value bounded."""

    def __init__(self, text: str | int | float, values: Mapping[str, int | float], integer: bool):
        self.text, self.values, self.integer = text, values, integer

    def ev(self, n: ast.expr):
        if isinstance(n, ast.Constant):
            return n.value
        if isinstance(n, ast.Name):
            if n.id not in self.values:
                raise ExprError(f"{self.text!r}: unknown name {n.id!r} (known: {', '.join(sorted(self.values))})")
            return self.values[n.id]
        if isinstance(n, ast.UnaryOp):
            v = self.ev(n.operand)
            return -v if isinstance(n.op, ast.USub) else v
        if isinstance(n, ast.Call):
            return self.bounded(FUNCTIONS[n.func.id](*[self.ev(a) for a in n.args]))
        return self.binary(n.op, self.ev(n.left), self.ev(n.right))

    def binary(self, op: ast.operator, a, b):
        if isinstance(op, ast.Add):
            return self.bounded(a + b)
        if isinstance(op, ast.Sub):
            return self.bounded(a - b)
        if isinstance(op, ast.Mult):
            return self.bounded(a * b)
        if isinstance(op, ast.Pow):
            if abs(b) > MAX_EXPONENT:
                raise ExprError(f"{self.text!r}: an exponent of {b}; at most {MAX_EXPONENT}")
            return self.bounded(a ** b)
        return self.divide(op, a, b)

    def divide(self, op: ast.operator, a, b):
        if b == 0:
            raise ExprError(f"{self.text!r}: division by zero")
        if isinstance(op, ast.Mod):
            return math.fmod(a, b) if not (isinstance(a, int) and isinstance(b, int)) else a - b * int(a / b)
        if isinstance(op, ast.FloorDiv):
            return self.bounded(a // b)
        if isinstance(a, int) and isinstance(b, int) and self.integer:
            q = abs(a) // abs(b)                     # C: truncation toward zero
            return q if (a >= 0) == (b >= 0) else -q
        return self.bounded(a / b)                   # 1e300 / 1e-300 is inf

    def bounded(self, v):
        if isinstance(v, complex):
            raise ExprError(f"{self.text!r}: a complex number (a negative number to a fractional power)")
        if abs(v) > MAX_MAGNITUDE or v != v:
            shown = f"{v:.3g}" if isinstance(v, float) else f"a {v.bit_length()}-bit number"
            raise ExprError(f"{self.text!r}: a value of {shown}, past {MAX_MAGNITUDE:.3g}; a rubric's expression is a size")
        return v


def evaluate(text: str | int | float, values: Mapping[str, int | float], *, integer: bool = True) -> int | float:
    """The expression's value given the dimensions; integer=True keeps C's integer semantics."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return int(text) if integer and float(text).is_integer() else text
    node = _tree(text)
    try:
        value = _Evaluation(text, values, integer).ev(node)
    except ExprError:
        raise
    except (ArithmeticError, TypeError, ValueError) as exc:    # sqrt(0 - 1), min(), a float ** past a float
        raise ExprError(f"{text!r}: {exc}") from None
    if integer and isinstance(value, float):
        if not value.is_integer():
            raise ExprError(f"{text!r} = {value}: expected a whole number")
        value = int(value)
    return value
