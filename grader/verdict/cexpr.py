"""A C integer expression's value, for the verdict's readers of the student's indices
(verdict/bounds.py: a faulting thread's subscript; verdict/causes.py: a stride followed to what it
is computed from): + - * / % << >> and min/max over named values, casts dropped; anything else is
None. Never executed, never compiled: Python's ast walked over those operators alone."""

from __future__ import annotations

import ast
import re

_CAST = re.compile(r"\(\s*(?:const\s+)?(?:unsigned\s+|signed\s+)?(?:size_t|int|long\s+long|long|unsigned|short|"
                   r"u?int(?:8|16|32|64)_t|ptrdiff_t|ssize_t)\s*\)")
_STATIC_CAST = re.compile(r"\b(?:static_cast|reinterpret_cast)\s*<[^<>]*>\s*")
_SUFFIX = re.compile(r"\b(\d+)(?:[uU][lL]{0,2}|[lL]{1,2}[uU]?)\b")


def uncast(expr: str) -> str:
    """expr without its integer casts ((size_t)r, static_cast<int>(c) -> (c))."""
    return _STATIC_CAST.sub("", _CAST.sub(" ", expr))


def evaluate(expr: str, env: dict[str, int]) -> int | None:
    """An integer C expression's value with the names in env, or None (a name unknown, an operator
    outside + - * / % << >> min max, a division by zero)."""
    text = _STATIC_CAST.sub("", _CAST.sub(" ", expr))
    text = _SUFFIX.sub(r"\1", text)
    text = re.sub(r"\b(threadIdx|blockIdx|blockDim|gridDim)\.([xyz])\b", r"\1_\2", text)
    text = re.sub(r"\b(?:std::|::)?(min|max|umin|umax)\s*\(", r"\1(", text)
    text = text.replace("/", "//").strip()
    if not text or re.search(r"[?:\"'\[\]{}.]|&&|\|\||[<>]=?(?![<>])|(?<![<>])[<>](?![<>])", text):
        return None
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        return None
    return _value(tree.body, env)


def truth(cond: str, env: dict[str, int]) -> bool | None:
    """A condition's truth (comparisons of such expressions joined by && || !), or None where a
    part of it cannot be evaluated."""
    text = cond.strip()
    depth, i = 0, 0
    for op in ("||", "&&"):                    # the loosest operator at the top level splits first
        depth = 0
        for i in range(len(text)):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            if depth == 0 and text.startswith(op, i):
                a, b = truth(text[:i], env), truth(text[i + 2:], env)
                if op == "||":
                    return True if (a or b) else (None if a is None or b is None else False)
                return False if (a is False or b is False) else (None if a is None or b is None else True)
    if text.startswith("!") and not text.startswith("!="):
        inner = truth(text[1:], env)
        return None if inner is None else not inner
    if text.startswith("(") and bracketed(text, 0)[1] == len(text):
        return truth(text[1:-1], env)
    m = re.fullmatch(r"(.+?)(<=|>=|==|!=|(?<![<>])<(?![<])|(?<![<>])>(?![>]))(.+)", text, re.S)
    if m is None:
        v = evaluate(text, env)
        return None if v is None else v != 0
    a, b = evaluate(m.group(1), env), evaluate(m.group(3), env)
    if a is None or b is None:
        return None
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b, "!=": a != b}[m.group(2)]


def _value(node: ast.AST, env: dict[str, int]) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.Name):
        return env.get(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _value(node.operand, env)
        return None if v is None else (-v if isinstance(node.op, ast.USub) else v)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("min", "max", "umin",
                                                                                           "umax"):
        args = [_value(a, env) for a in node.args]
        if len(args) != 2 or None in args:
            return None
        return min(args) if "min" in node.func.id else max(args)
    if isinstance(node, ast.BinOp):
        a, b = _value(node.left, env), _value(node.right, env)
        return None if a is None or b is None else _binary(node.op, a, b)
    return None


def _binary(op: ast.operator, a: int, b: int) -> int | None:
    """a op b as C computes it on integers (None where C's value is undefined or not one of these)."""
    if isinstance(op, ast.Add):
        return a + b
    if isinstance(op, ast.Sub):
        return a - b
    if isinstance(op, ast.Mult):
        return a * b
    if isinstance(op, (ast.FloorDiv, ast.Mod)):
        if b == 0:
            return None
        q = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)       # C truncates toward zero
        return q if isinstance(op, ast.FloorDiv) else a - b * q
    if isinstance(op, ast.LShift) and 0 <= b < 64:
        return a << b
    if isinstance(op, ast.RShift) and 0 <= b < 64:
        return a >> b
    return None


def bracketed(code: str, open_at: int) -> tuple[str, int]:
    """The text inside the bracket at open_at ([ or (), and the index just past its close."""
    pairs = {"[": "]", "(": ")"}
    close, depth, i = pairs[code[open_at]], 0, open_at
    while i < len(code):
        if code[i] == code[open_at]:
            depth += 1
        elif code[i] == close:
            depth -= 1
            if depth == 0:
                return code[open_at + 1:i], i + 1
        i += 1
    return code[open_at + 1:], len(code)


def split_args(text: str) -> list[str]:
    """A call's or a brace list's arguments at its top level."""
    out, depth, last = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1, "{": 1, "}": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            out.append(text[last:i].strip())
            last = i + 1
    out.append(text[last:].strip())
    return [a for a in out if a]
