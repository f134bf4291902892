"""A kernel read as the compiler sees it (object-like macros expanded, comments blanked): its
parameters, its statements' values for one thread (verdict/cexpr.py's evaluator), the loops and ifs
around an access, its subscripts (the host's launches of it: verdict/hostlaunch.py). For
verdict/bounds.py (an access past a buffer). A scan, never compiled or run.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from grader.core.emulation import device_bodies
from grader.verdict.cexpr import bracketed, evaluate, truth

ASSIGN = re.compile(r"(?<![\w.\]])([A-Za-z_]\w*)\s*=(?!=)\s*([^;{}]*);")


_SUBSCRIPT = re.compile(r"(?<![\w.])([A-Za-z_]\w*)\s*\[")


_WIDTH = {"float4": 4, "float2": 2, "int4": 4, "int2": 2, "uint4": 4, "uint2": 2, "double2": 4, "double": 2}


@dataclass(frozen=True)
class Thread:
    """A thread of a launch: its block and thread, the launch's grid and block."""

    block: tuple[int, int, int]
    thread: tuple[int, int, int]
    block_dim: tuple[int, int, int]
    grid_dim: tuple[int, int, int]

    def said(self) -> str:
        def xyz(v: tuple[int, ...]) -> str:
            used = [str(c) for c in v[:max(1, max((k + 1 for k, c in enumerate(v) if c), default=1))]]
            return f"({', '.join(used)})" if len(used) > 1 else used[0]
        return f"thread {xyz(self.thread)} of block {xyz(self.block)}"

    def env(self) -> dict[str, int]:
        out = {}
        for name, v in (("threadIdx", self.thread), ("blockIdx", self.block), ("blockDim", self.block_dim),
                        ("gridDim", self.grid_dim)):
            out.update({f"{name}_{a}": int(c) for a, c in zip("xyz", v)})
        return out


def added_terms(expr: str) -> list[str]:
    """expr's terms added at its top level (`row * cols + col` -> ['row * cols', 'col'])."""
    out, depth, last = [], 0, 0
    for i, ch in enumerate(expr):
        depth += {"(": 1, ")": -1, "[": 1, "]": -1}.get(ch, 0)
        if depth == 0 and ch in "+-" and i > last and expr[i - 1] not in "*/%(<>" and not expr[last:i].strip() == "":
            out.append(expr[last:i])
            last = i + 1
    out.append(expr[last:])
    return [t.strip() for t in out if t.strip()]


def product_factors(term: str) -> list[str]:
    out, depth, last = [], 0, 0
    for i, ch in enumerate(term):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and ch == "*":
            out.append(term[last:i])
            last = i + 1
    out.append(term[last:])
    return [f.strip() for f in out]


@dataclass
class Kernel:
    start: int                  # the body's offset in the code
    first_line: int
    body: str
    params: dict[str, str]      # a parameter's name: its declaration


def kernels(code: str) -> list[Kernel]:
    out = []
    for start, body in device_bodies(code):
        close = code.rfind(")", 0, start)
        depth, i = 0, close
        while i >= 0:
            depth += {")": 1, "(": -1}.get(code[i], 0)
            if depth == 0:
                break
            i -= 1
        params = {}
        for p in code[i + 1:close].split(","):
            m = re.search(r"([A-Za-z_]\w*)\s*(?:\[[^\]]*\])?\s*$", p.strip())
            if m:
                params[m.group(1)] = p.strip()
        out.append(Kernel(start, code.count("\n", 0, start) + 1, body, params))
    return out


def environment(k: Kernel, upto: int, thread: Thread, dims: dict[str, int],
                 loop: tuple[str, int] | None = None) -> dict[str, int]:
    """The names' values for thread at offset upto of k's body: the parameters named as the
    exercise's dimensions, then each assignment before upto in order (a loop's variable fixed)."""
    env = thread.env()
    for p in k.params:
        if p in dims:
            env[p] = dims[p]
    for m in ASSIGN.finditer(k.body[:upto]):
        name = m.group(1)
        if loop is not None and name == loop[0]:
            env[name] = loop[1]
            continue
        v = evaluate(m.group(2), env)
        if v is None:
            env.pop(name, None)
        else:
            env[name] = v
    if loop is not None:
        env[loop[0]] = loop[1]
    return env


def enclosing_loop(body: str, at: int) -> tuple[str, str, str, str] | None:
    """The innermost for loop whose body holds offset at: (variable, first value, condition, step)."""
    found = None
    for m in re.finditer(r"\bfor\s*\(", body[:at]):
        head, end = bracketed(body, m.end() - 1)
        parts = head.split(";")
        if len(parts) != 3:
            continue
        init = re.match(r"\s*(?:[\w:<>]+\s+)*([A-Za-z_]\w*)\s*=\s*(.*)$", parts[0], re.S)
        if init is None:
            continue
        rest = body[end:]
        brace = re.match(r"\s*\{", rest)
        if brace:
            _, close = body_span(body, end + brace.end() - 1)
            inside = close > at
        else:
            inside = body.find(";", end) >= at
        if inside:
            found = (init.group(1), init.group(2), parts[1], parts[2])
    return found


def body_span(body: str, open_at: int) -> tuple[int, int]:
    depth, i = 0, open_at
    while i < len(body):
        depth += {"{": 1, "}": -1}.get(body[i], 0)
        if depth == 0:
            return open_at, i
        i += 1
    return open_at, len(body)


def loop_values(loop: tuple[str, str, str, str], env: dict[str, int], limit: int = 4096) -> list[int]:
    """The values a loop's variable takes for this thread, up to limit of them."""
    var, first, cond, step = loop
    v = evaluate(first, env)
    if v is None:
        return []
    m = re.fullmatch(rf"\s*{re.escape(var)}\s*(<=?)\s*(.+?)\s*", cond)
    bound = evaluate(m.group(2), env) if m else None
    s = re.fullmatch(rf"\s*(?:\+\+\s*{re.escape(var)}|{re.escape(var)}\s*\+\+|{re.escape(var)}\s*\+=\s*(.+?))\s*", step)
    by = 1 if s and s.group(1) is None else (evaluate(s.group(1), env) if s else None)
    if bound is None or not by or by < 0:
        return [v]
    out = []
    while (v < bound or (m.group(1) == "<=" and v == bound)) and len(out) < limit:
        out.append(v)
        v += by
    return out


def comparisons(body: str, names: set[str]) -> list[tuple[str, str, int]]:
    """The comparisons in body of any of names with a bound: (name, bound's text, offset)."""
    out = []
    alt = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    if not alt:
        return out
    bound = r"([^;&|?(){}]*(?:\([^()]*\)[^;&|?(){}]*)*)"
    for m in re.finditer(rf"(?<![\w.])({alt})\s*(?:<=?|>=?|!=)(?![<>])\s*{bound}", body):
        out.append((m.group(1), m.group(2).strip(), m.start()))
    for m in re.finditer(rf"{bound}(?<![<>])(?:<=?|>=?)\s*({alt})(?![\w.(\[])", body):
        if m.group(1).strip():
            out.append((m.group(2), m.group(1).strip().split("(")[-1].strip(), m.start()))
    return out


def derived_from(body: str, name: str) -> set[str]:
    """name and the names assigned from it (to a fixed point)."""
    names, assigned = {name}, [(m.group(1), m.group(2)) for m in ASSIGN.finditer(body)]
    changed = True
    while changed:
        changed = False
        for n, expr in assigned:
            if n not in names and any(re.search(rf"(?<![\w.]){re.escape(x)}\b", expr) for x in names):
                names.add(n)
                changed = True
    return names


def accesses(sub_code: str, line: int | None, only: Kernel | None = None):
    """Each subscript of a pointer parameter in device code (on line, where it is known; in only,
    where given): (kernel, pointer, subscript, offset in the body, line, floats an element holds,
    whether it is written)."""
    for k in [only] if only is not None else kernels(sub_code):
        for m in _SUBSCRIPT.finditer(k.body):
            if m.group(1) not in k.params or "*" not in k.params[m.group(1)] and "[" not in k.params[m.group(1)]:
                continue
            at_line = k.first_line + k.body.count("\n", 0, m.start())
            if line is not None and at_line != line:
                continue
            subscript, end = bracketed(k.body, m.end() - 1)
            decl = k.params[m.group(1)]
            width = next((w for t, w in _WIDTH.items() if re.search(rf"\b{t}\b", decl)), 1)
            written = re.match(r"\s*(?:\.\s*[xyzw]\s*)?=(?!=)", k.body[end:]) is not None
            yield k, m.group(1), subscript, m.start(), at_line, width, written


def environments(k: Kernel, offset: int, thread: Thread, dims: dict[str, int], ends_only: bool = False):
    """The names' values for thread at offset: once, or once for each value of the loop around it
    (ends_only: its first two and last two)."""
    env = environment(k, offset, thread, dims)
    loop = enclosing_loop(k.body, offset)
    if loop is None:
        yield env
        return
    values = loop_values(loop, env)
    for v in (values[:2] + values[2:][-2:] if ends_only else values):
        yield environment(k, offset, thread, dims, (loop[0], v))


def line_in(code: str, k: Kernel, off: int) -> int:
    return code.count("\n", 0, k.start + off) + 1


def runs(body: str, offset: int, env: dict[str, int]) -> bool | None:
    """Whether the statement at offset runs for env's thread, by the ifs around it and the early
    returns before it (None: a condition that cannot be evaluated)."""
    if not _followed(body, offset):
        return None
    passes = _loop_passes(body, offset, env)
    if not passes:
        return passes               # this pass of the loop does not run (None: cannot tell)
    return _guards_pass(body, offset, env)


def _followed(body: str, offset: int) -> bool:
    """Whether what surrounds the statement at offset is read here: not a conditional expression or a
    short circuit around it, not an else, a while, a do or a switch."""
    start = max(body.rfind(";", 0, offset), body.rfind("{", 0, offset), body.rfind("}", 0, offset))
    before = body[start + 1:offset]
    for m in reversed(list(re.finditer(r"\b(?:if|for|while)\s*\(", before))):     # a guard's own head is no part of it
        before = before[:m.start()] + before[bracketed(before, m.end() - 1)[1]:]
    if "?" in before or re.search(r"&&|\|\|", before):
        return False
    for m in re.finditer(r"\belse\b|\bwhile\s*\(|\bdo\b|\bswitch\s*\(", body[:offset]):
        block = re.match(r"\s*(?:\([^{};]*\))?\s*\{", body[m.end():])
        if block and body_span(body, m.end() + block.end() - 1)[1] >= offset:
            return False
    return True


def _loop_passes(body: str, offset: int, env: dict[str, int]) -> bool | None:
    """Whether the condition of each for loop around the statement at offset holds for env (None: cannot tell)."""
    for m in re.finditer(r"\bfor\s*\(", body[:offset]):
        head, end = bracketed(body, m.end() - 1)
        parts = head.split(";")
        brace = re.match(r"\s*\{", body[end:])
        hi = body_span(body, end + brace.end() - 1)[1] if brace else body.find(";", end)
        if len(parts) == 3 and end <= offset <= hi:
            t = truth(parts[1], env) if parts[1].strip() else True
            if not t:
                return t
    return True


def _guards_pass(body: str, offset: int, env: dict[str, int]) -> bool | None:
    """Whether every if around the statement at offset holds for env, and no `if (...) return;` of
    its block before it returns (None: a condition that cannot be evaluated)."""
    for m in re.finditer(r"\bif\s*\(", body[:offset]):
        cond, end = bracketed(body, m.end() - 1)
        after = body[end:]
        ret = re.match(r"\s*(?:return\s*;|\{\s*return\s*;\s*\})", after)
        if ret is not None:
            block = enclosing_block(body, m.start())
            if not block[0] <= offset <= block[1]:
                continue                    # a return in a block the access is not in
            t = truth(cond, env)
            if t is None or t:
                return None if t is None else False
            continue
        brace = re.match(r"\s*\{", after)
        if brace:
            lo, hi = body_span(body, end + brace.end() - 1)
        else:
            lo, hi = end, body.find(";", end)
        if lo <= offset <= hi:
            t = truth(cond, env)
            if not t:
                return t
    return True


def enclosing_block(body: str, at: int) -> tuple[int, int]:
    depth, i = 0, at
    while i > 0:
        i -= 1
        depth += {"}": 1, "{": -1}.get(body[i], 0)
        if depth < 0:
            return body_span(body, i)
    return 0, len(body)


def corners(grid: list[int], block: list[int]) -> list[Thread]:
    """The first and last block and thread along each axis of a launch: where an index is at its
    least and its most for an index that grows with them."""
    g = (tuple(grid) + (1, 1, 1))[:3]
    b = (tuple(block) + (1, 1, 1))[:3]
    ends = [sorted({0, n - 1}) for n in g] + [sorted({0, n - 1}) for n in b]
    return [Thread((bx, by, bz), (tx, ty, tz), b, g) for bx, by, bz, tx, ty, tz in itertools.product(*ends)]


def name_of(code: str, k: Kernel) -> str:
    head = code[:code.rfind("(", 0, code.rfind(")", 0, k.start) + 1)]
    m = re.search(r"([A-Za-z_]\w*)\s*(?:<[^<>]*>)?\s*$", head)
    return m.group(1) if m else ""
