"""Array expressions: what a rubric's hypotheses (its `hypotheses` key) say a wrong kernel computes.

An expression is numpy arithmetic over the case's named arrays and numbers, written in the
rubric: `gelu_erf(x + bias[arange(rows) % cols][:, None])`. Its names are the exercise's input
tensors (float64), its dimensions and derived values (integers), `answer` (the float64 answer for
the output being diagnosed), the hypotheses' own terms, a variant's fitted parameter, and pi.
Accepted: numbers, names, + - * / // % ** (/ divides as reals: 1 / 2 is 0.5), unary minus, the
comparisons and & | ~ (for where a variant is defined), subscripts (slices, `...`, `None`, arrays
of indices) and the functions in FUNCTIONS. A tensor named as a Python keyword (`in`) is written
as it is. parse() checks the text once (the rubric's loader calls it; nothing here imports numpy);
arrayeval.evaluate() runs it on a case's arrays.
"""

from __future__ import annotations

import ast
import io
import keyword
import tokenize
from functools import lru_cache

MAX_LENGTH = 2000            # characters of one expression
MAX_NODES = 400
MAX_GROWTH = 8               # no intermediate array may hold more than this many times the largest given one

# name -> (fewest, most) positional arguments; what each does is in arrayeval
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


def name_of(node: ast.Name) -> str:
    """The name as the rubric wrote it (a keyword's renaming undone)."""
    return node.id.removeprefix(_KEYWORD_PREFIX)


def _check_node(text: str, node: ast.AST) -> None:
    """One node of the tree: a number, `...` or None, an allowed form, or a known function with its
    count of arguments."""
    if isinstance(node, ast.Constant):
        if node.value is Ellipsis or node.value is None:
            return
        if isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return
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
        _check_node(text, node)
    if count > MAX_NODES:
        raise ArrayExprError(f"{text[:60]!r}...: longer than {MAX_NODES} terms")
    return tree.body


def names(text: str) -> set[str]:
    """The names an expression reads (functions aside)."""
    tree = parse(text)
    calls = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    return {name_of(n) for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) not in calls}
