"""Why elements are never written, from the launch (the scanned source: core.source.Submission,
.code with comments and strings blanked, lines kept). The verdict asks only where the outputs show
unwritten elements and no guard of the file explains them (verdict/causes.guard_off_by_one):

- grid_rounds_down: the grid's block count divides without rounding up (`pairs / 256`,
  `rows / ROWS` in a dim3), in a file whose kernels have no grid-stride loop (one that covers
  everything whatever the grid);
- no_launch: a launcher whose switch has a default that launches nothing, where none of the
  output was written;
- block_too_small: a kernel that gives each thread of a block one index (`d = threadIdx.x`, no
  blockIdx, no loop by blockDim) launched with a fixed block size: indices past it are never reached;
- tail_start: a float4 loop's scalar tail that starts at the count of float4s (`n4 + tid`, where
  `n4 = n / 4`), not at the first float after them (`n4 * 4`).
"""

from __future__ import annotations

import re

from grader.core.source import Submission
from grader.verdict.causes import Cause, body_lines, line_of, quoted

_LAUNCH = re.compile(r"\b(?P<kernel>[A-Za-z_]\w*)\s*(?:<[^<>;]*>)?\s*<<<(?P<config>[^;]*?)>>>")


def _kernel_bodies(sub: Submission) -> list[str]:
    return [body for start, body in body_lines(sub)
            if sub.code.rfind("__global__", 0, start) > sub.code.rfind("__device__", 0, start)]


def _top_level_divisions(expr: str) -> list[re.Match]:
    """`a / b` at the expression's own depth (not inside a rounded-up `(a + b - 1) / b`)."""
    out = []
    for m in re.finditer(r"(?<![\w.)\]])(?P<a>[A-Za-z_]\w*)\s*/\s*(?P<b>[A-Za-z_]\w*|\d+)(?!\s*[.\w])", expr):
        before = expr[:m.start()]
        if before.count("(") - before.count(")") == 0:
            out.append(m)
    return out


def grid_rounds_down(sub: Submission) -> Cause | None:
    if any("gridDim" in body for body in _kernel_bodies(sub)):
        return None                     # a grid-stride loop covers everything whatever the grid
    code = sub.code
    for launch in _LAUNCH.finditer(code):
        grid = launch.group("config").split(",")[0].strip()
        candidates = [(grid, launch.start())]
        if re.fullmatch(r"[A-Za-z_]\w*", grid):
            if re.search(rf"\b{grid}\s*(?:\+\+|\+=)|\+\+\s*{grid}\b", code[:launch.start()]):
                continue                # rounded up afterwards: if (n % 256) blocks++
            d = list(re.finditer(rf"\b{grid}\s*(?:=\s*(?P<e>[^;]+)|\((?P<args>[^;]*)\))\s*;", code[:launch.start()]))
            if d:
                candidates = [(d[-1].group("e") or d[-1].group("args"), d[-1].start())]
        for expr, at in candidates:
            parts = [expr]
            args = re.fullmatch(r"\s*(?:dim3\s*)?\((.*)\)\s*", expr, re.S)
            if args or "," in expr:
                parts = _split(args.group(1) if args else expr)
            for part in parts:
                for m in _top_level_divisions(part):
                    line = line_of(code, at)
                    a, b = m.group("a"), m.group("b")
                    return Cause("grid_rounds_down", line,
                                 f"line {line} (`{quoted(sub, line)}`): `{a} / {b}` rounds down, so the grid has "
                                 f"one block too few whenever {a} is not a multiple of {b}, and no thread writes "
                                 f"the last ones: round up, ({a} + {b} - 1) / {b}")
    return None


def _split(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return parts + [cur]


def no_launch(sub: Submission) -> Cause | None:
    m = re.search(r"\bdefault\s*:\s*(?:break|return)\b[^;]*;", sub.code)
    if m is None or "switch" not in sub.code[:m.start()]:
        return None
    line = line_of(sub.code, m.start())
    return Cause("no_launch", line,
                 f"line {line} (`{quoted(sub, line)}`): at this case the switch takes its default, which launches "
                 f"no kernel, so nothing is written: every size the exercise may give needs a launch (a kernel "
                 f"that takes the size as a parameter, for the sizes your specialisations do not cover)")


def block_too_small(sub: Submission) -> Cause | None:
    for body in _kernel_bodies(sub):
        m = re.search(r"\b(?:int|unsigned|size_t|auto)?\s*(?P<i>[A-Za-z_]\w*)\s*=\s*(?:\(\w+\)\s*)?threadIdx\.x\s*;", body)
        if m is None or "blockDim.x" in body:
            continue
        i = m.group("i")
        if re.search(rf"\bblockIdx\.x\b[^;]*\b{i}\b|\b{i}\b[^;]*\bblockIdx\.x", body):
            continue
        for launch in _LAUNCH.finditer(sub.code):
            config = _split(launch.group("config"))
            if len(config) >= 2 and re.fullmatch(r"\s*\d+\s*", config[1]):
                line = line_of(sub.code, launch.start())
                n = config[1].strip()
                return Cause("block_too_small", line,
                             f"line {line} (`{quoted(sub, line)}`): each block has {n} threads and the kernel gives "
                             f"each thread one {i} ({i} = threadIdx.x), so {i} never reaches {n} or more: loop "
                             f"`for ({i} = threadIdx.x; {i} < ...; {i} += blockDim.x)`")
    return None


def tail_start(sub: Submission) -> Cause | None:
    if "float4" not in sub.code:
        return None
    for body in _kernel_bodies(sub):
        for m in re.finditer(r"\b(?P<q>[A-Za-z_]\w*)\s*=\s*(?P<n>[A-Za-z_]\w*)\s*/\s*4\s*;", body):
            q = m.group("q")
            use = re.search(rf"(?<![\w.*])\b{q}\s*\+\s*(?!\d)[A-Za-z_]", body[m.end():])
            if use is None:
                continue
            at = sub.code.find(body) + m.end() + use.start()
            line = line_of(sub.code, at)
            return Cause("tail_start", line,
                         f"line {line} (`{quoted(sub, line)}`): the scalar tail starts at {q}, the number of float4s "
                         f"({q} = {m.group('n')} / 4), not at {q} * 4, the first float after them: the last "
                         f"{m.group('n')} % 4 floats are never written")
    return None
