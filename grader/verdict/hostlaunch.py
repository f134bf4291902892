"""The host's launches of a kernel, read as the compiler sees them: each launch's arguments, the
values they give the kernel's parameters (a launcher that passes headDim for halfDim), the tensors its
pointers are, and the launches a launcher makes at a shape with their grid and block (where the ifs
around them let them run). For verdict/bounds.py and verdict/checks.py. A scan, never compiled or run.
"""

from __future__ import annotations

import re

from grader.core.frames import LaunchRecord
from grader.core.scan import expand_object_macros
from grader.core.source import Submission
from grader.verdict.cexpr import bracketed, evaluate, split_args
from grader.verdict.kernelread import ASSIGN, Kernel, body_span, runs


def launches_of(code: str, name: str) -> list[list[str]]:
    """The arguments of each launch of the kernel name in code (`name<<<...>>>(args)`)."""
    out = []
    for m in re.finditer(rf"\b{re.escape(name)}\s*<<<[^;]*?>>>\s*\(", code):
        out.append(split_args(bracketed(code, m.end() - 1)[0]))
    return out


def host_env(code: str, dims: dict[str, int], upto: int) -> dict[str, int]:
    """The host's names before offset upto: the dimensions, then every assignment in order."""
    env = dict(dims)
    for m in ASSIGN.finditer(code[:upto]):
        v = evaluate(m.group(2), env)
        if v is not None:
            env[m.group(1)] = v
    return env


def kernel_values(code: str, name: str, k: Kernel, dims: dict[str, int],
                   buffers: dict) -> tuple[dict[str, int], dict[str, str], list[tuple[str, str, int]]]:
    """A launched kernel's scalar parameters' values, its pointers' tensors, and the parameters
    named as a dimension that the launch gives another value ((parameter, argument, value)): through
    the launcher's arguments (a tensor's name with a cast, a dimension, a host variable), else by the
    parameter's own name (the default launch passes each tensor and dimension by name)."""
    values = {p: dims[p] for p in k.params if p in dims}
    tensors = {p: p for p in k.params if p in buffers}
    given: list[tuple[str, str, int]] = []
    for args in launches_of(code, name)[:1]:
        at = code.find(f"{name}")
        env = host_env(code, dims, code.find("<<<", at) if at >= 0 else len(code))
        for p, a in zip(k.params, args):
            bare = re.sub(r"^\(\s*(?:const\s+)?\w+\s*\*\s*\)\s*|^(?:reinterpret_cast|static_cast)\s*<[^<>]*>\s*",
                          "", a.strip()).strip("() ")
            if bare in buffers:
                tensors[p] = bare
                continue
            v = evaluate(a, env)
            if v is None:
                continue
            if p in dims and v != dims[p]:
                given.append((p, a.strip(), v))
            values[p] = v
    return values, tensors, given


def dim3_of(code: str, expr: str, env: dict[str, int]) -> list[int] | None:
    """A launch's grid or block as (x, y, z): `dim3(a, b)`, a dim3 variable, or one number."""
    expr = expr.strip()
    m = re.fullmatch(r"dim3\s*[({](.*)[)}]", expr, re.S)
    if m is None and re.fullmatch(r"[A-Za-z_]\w*", expr):
        d = list(re.finditer(rf"\bdim3\s+{re.escape(expr)}\s*(?:=\s*dim3\s*)?([({{])", code))
        if d:
            inner, _ = bracketed(code, d[-1].end() - 1) if d[-1].group(1) == "(" else (
                code[d[-1].end():code.find("}", d[-1].end())], 0)
            m = re.fullmatch(r"(.*)", inner, re.S)
    parts = split_args(m.group(1)) if m else [expr]
    values = [evaluate(p, env) for p in parts]
    if not values or len(values) > 3 or None in values:
        return None
    return (values + [1, 1])[:3]


def launches_at(sub: Submission, dims: dict[str, int], default: tuple[str, list[int], list[int]] | None) -> list:
    """The kernels a launcher launches at these dimensions (LaunchRecords), where the launch's
    configuration evaluates and the ifs around it let it run; else the default launch of the
    exercise's kernel (default: its name, grid and block; None where the file has a launcher)."""
    code = expand_object_macros(sub.code)
    out = []
    for m in re.finditer(r"\b([A-Za-z_]\w*)\s*<<<(.*?)>>>", code, re.S):
        env = host_env(code, dims, m.start())
        lo, hi = function_around(code, m.start())
        if runs(code[lo:hi + 1], m.start() - lo, env) is not True:
            continue
        args = split_args(m.group(2))
        grid, block = (dim3_of(code, a, env) for a in args[:2]) if len(args) >= 2 else (None, None)
        if grid is not None and block is not None:
            out.append(LaunchRecord(kernel=m.group(1), grid=grid, block=block, launches=1))
    if not out and default is not None:
        out.append(LaunchRecord(kernel=default[0], grid=list(default[1]), block=list(default[2]), launches=1))
    return out


def function_around(code: str, at: int) -> tuple[int, int]:
    """The outermost braces around offset at (the function's body)."""
    lo, hi = 0, len(code)
    depth, i = 0, at
    while i > 0:
        i -= 1
        depth += {"}": 1, "{": -1}.get(code[i], 0)
        if depth < 0:
            lo, depth = i, 0
    if lo:
        hi = body_span(code, lo)[1]
    return lo, hi
