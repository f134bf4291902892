"""The line of the student's own code behind a wrong output: read from the scanned source
(core.source.Submission: .code has comments and strings blanked, lines kept; .text is quoted).

A scan, not a parse, and conservative: each finder names a line only where the code has the shape
of a usual mistake, and the verdict (verdict/__init__.py) names it only where the run's outputs
show what that mistake does (a write past the end, elements never written, an output that changes
with the threads' order), or, for a race, says what this backend could not see. A correct kernel
(a grid-stride loop, each thread its own element, a reduction with barriers, atomicAdd) gets none.

- guard_off_by_one: a bounds check one past the end (`col <= cols`, `i < n + 1`, `!(i > n)`,
  `if (i > n) return;`, a float4 tail's `i + 3 <= n`) or one short (`col < cols - 1`).
- index_strides: the row's start stepped by another length than the row's (`row * blockDim.x`,
  `row * rows`, a stride variable, `x + row * rows`, a cast between), a column scaled into the
  index (`col * sizeof(float)`), or the column stepped by a dimension (`col * cols + row`).

The races (a lost update, a missing barrier) are verdict/races.py's, which reads the source with
the helpers here (Cause, line_of, quoted, body_lines, index_names).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from grader.core.emulation import device_bodies
from grader.core.scan import expand_object_macros
from grader.core.source import Submission
from grader.verdict.cexpr import split_args
from grader.verdict.strides import PROBE, launch_width


@dataclass(frozen=True)
class Cause:
    """A line of the student's code that carries a mistake: its code, its number, what it is."""

    code: str               # guard_past_end, guard_stops_short, row_stride, col_stride, race_lost_update, ...
    line: int
    text: str               # 'line 14: `if (col <= cols)` lets col == cols through, one past the end: ...'
    fix: str = ""           # a guard's comparison as it should be written: 'col < cols'


def line_of(code: str, pos: int) -> int:
    return code.count("\n", 0, pos) + 1


def quoted(sub: Submission, line: int, start: int | None = None, end: int | None = None) -> str:
    """The student's own text of a line (or of its columns start:end), one line, at most 70 columns."""
    lines = sub.text.splitlines()
    raw = lines[line - 1] if 0 < line <= len(lines) else ""
    shown = (raw[start:end] if start is not None else raw).strip()
    shown = re.sub(r"\s+", " ", shown)
    return shown if len(shown) <= 70 else shown[:67].rstrip() + "..."


def _statement_span(code: str, pos: int) -> tuple[int, int]:
    """The columns, in its line, of the `if (...)`/`for (...)` head or the statement around pos."""
    line_start = code.rfind("\n", 0, pos) + 1
    line_end = code.find("\n", pos)
    line_end = len(code) if line_end < 0 else line_end
    line = code[line_start:line_end]
    at = pos - line_start
    for m in re.finditer(r"\b(?:if|for|while)\s*\(", line):
        depth, i = 0, m.end() - 1
        while i < len(line):
            depth += {"(": 1, ")": -1}.get(line[i], 0)
            if depth == 0:
                break
            i += 1
        if m.start() <= at <= i:
            end = i + 1
            tail = re.match(r"\s*return\s*;", line[end:])
            return m.start(), end + (tail.end() if tail else 0)
    return 0, len(line)


def body_lines(sub: Submission) -> list[tuple[int, str]]:
    """(offset in code, text) of each __global__/__device__ body."""
    return device_bodies(sub.code)


# ---------------------------------------------------------------------------
# Guards
# ---------------------------------------------------------------------------


_ID = r"[A-Za-z_]\w*(?:\.[xyz])?"
# a bound: a size's name, or a product of names (a flattened size: rows * cols), casts allowed


_CAST = r"(?:\(\s*(?:size_t|int|unsigned|long|long\s+long|unsigned\s+int|int64_t|uint64_t)\s*\)\s*)?"


_BOUND = rf"{_CAST}[A-Za-z_]\w*(?:\s*\*\s*{_CAST}[A-Za-z_]\w*)*"


_END = r"(?!\s*(?:[-+*/%(\[.]|<<|>>))"            # the bound ends there: no `- 1`, no `/ 4` after it


_NOT_INDEX = {"threadIdx.x", "threadIdx.y", "threadIdx.z", "blockIdx.x", "blockIdx.y", "blockIdx.z"}


_ALONE = r"(?<![\w.+\-*/]\s)(?<![\w.+\-*/])"      # the index stands alone: no `a + ` before it


_AT_N = ("{i} == {n}", "`{i} < {n}`")                 # lets i == n through; i < n is right


_AT_N_LESS_1 = ("{i} == {n} - 1", "`{i} < {n}`")      # never lets i == n - 1 through

# (pattern, direction, how the fix is written: what it lets through or never does, and the check to
# write, as templates of the match's i and n, and of n's whole rows ({whole}: (B - 1) * D -> B * D))


_GUARDS = [
    (re.compile(rf"(?<![\w.])(?P<i>{_ID})\s*\+\s*3\s*<=\s*(?P<n>{_BOUND}){_END}"), "past",
     ("{i} + 3 == {n}", "`{i} + 3 < {n}`")),
    (re.compile(rf"(?<![\w.])(?P<i>{_ID})\s*\+\s*4\s*<\s*(?P<n>{_BOUND}){_END}"), "short",
     ("{i} + 4 == {n}", "`{i} + 4 <= {n}`")),
    (re.compile(rf"!\s*\(\s*(?P<i>{_ID})\s*>\s*(?P<n>{_BOUND})\s*\)"), "past", _AT_N),
    (re.compile(rf"\bif\s*\(\s*(?P<i>{_ID})\s*>\s*(?P<n>{_BOUND})\s*\)\s*return\b"), "past",
     ("{i} == {n}", "`if ({i} >= {n}) return;`")),
    (re.compile(rf"\bif\s*\(\s*(?P<i>{_ID})\s*>=\s*(?P<n>{_BOUND})\s*-\s*1\s*\)\s*return\b"), "short",
     ("{i} == {n} - 1", "`if ({i} >= {n}) return;`")),
    (re.compile(rf"{_ALONE}(?P<i>{_ID})\s*<=\s*(?P<n>{_BOUND}){_END}"), "past", _AT_N),
    (re.compile(rf"{_ALONE}(?P<i>{_ID})\s*<\s*(?P<n>{_BOUND})\s*\+\s*1{_END}"), "past", _AT_N),
    (re.compile(rf"(?<![\w.])(?P<n>{_BOUND})\s*>=\s*(?P<i>{_ID})(?![\w.]|\s*[-+*/])"), "past", _AT_N),
    (re.compile(rf"{_ALONE}(?P<i>{_ID})\s*<\s*(?P<n>{_BOUND})\s*-\s*1{_END}"), "short", _AT_N_LESS_1),
    (re.compile(rf"{_ALONE}(?P<i>{_ID})\s*<=\s*(?P<n>{_BOUND})\s*-\s*2{_END}"), "short", _AT_N_LESS_1),
    # a flattened bound a whole row short: (B - 1) * D
    (re.compile(rf"\bif\s*\(\s*(?P<i>{_ID})\s*>=\s*(?P<n>\(\s*[A-Za-z_]\w*\s*-\s*1\s*\)\s*\*\s*[A-Za-z_]\w*)"
                rf"\s*\)\s*return\b"), "short",
     ("{i} from {n} on", "`if ({i} >= {whole}) return;`")),
    (re.compile(rf"(?<![\w.])(?P<i>{_ID})\s*<\s*(?P<n>\(\s*[A-Za-z_]\w*\s*-\s*1\s*\)\s*\*\s*[A-Za-z_]\w*){_END}"),
     "short", ("{i} from {n} on", "`{i} < {whole}`")),
]


def _whole(n: str) -> str:
    """(B - 1) * D -> B * D."""
    return re.sub(r"\(\s*([A-Za-z_]\w*)\s*-\s*1\s*\)", r"\1", n)


def index_names(body: str, roots: str = r"\b(?:threadIdx|blockIdx)\.[xyz]\b") -> set[str]:
    """Names that hold a thread's index: assigned from threadIdx, blockIdx (roots) or another such
    name (to a fixed point), and the loop variables of a for (a grid-stride loop's, a thread's own)."""
    assigned = [(m.group(1), m.group(2)) for m in re.finditer(r"\b([A-Za-z_]\w*)\s*=(?!=)\s*([^;]*)", body)]
    names: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, expr in assigned:
            if name in names:
                continue
            if re.search(roots, expr) or any(
                    re.search(rf"\b{re.escape(n)}\b", expr) for n in names):
                names.add(name)
                changed = True
    names |= {m.group(1) for m in re.finditer(r"\bfor\s*\(\s*(?:[\w:<>]+\s+)*([A-Za-z_]\w*)\s*=", body)}
    return names


def _addressing(body: str) -> set[str]:
    """Names that take part in an address: inside a subscript or added to a pointer, or assigned
    into a name that does (to a fixed point)."""
    names = {w for k in re.findall(r"\[([^\[\];]*)\]", body) for w in re.findall(r"[A-Za-z_]\w*", k)}
    names |= {w for e in re.findall(r"\b[A-Za-z_]\w*\s*\+\s*([^;,)]*)", body) for w in re.findall(r"[A-Za-z_]\w*", e)}
    assigned = [(m.group(1), m.group(2)) for m in re.finditer(r"\b([A-Za-z_]\w*)\s*=(?!=)\s*([^;]*)", body)]
    changed = True
    while changed:
        changed = False
        for name, expr in assigned:
            if name in names:
                new = set(re.findall(r"[A-Za-z_]\w*", expr)) - names
                if new:
                    names |= new
                    changed = True
    return names


def guard_off_by_one(sub: Submission) -> list[Cause]:
    """Every bounds check in device code one past the end (guard_past_end) or one short
    (guard_stops_short) of a size, where the index compared is a thread's index or a loop's that
    takes part in an address (a loop's counter of shuffle steps is no index)."""
    found: list[Cause] = []
    seen: set[int] = set()
    for start, body in body_lines(sub):
        indices = index_names(body) & _addressing(body)
        for pattern, direction, fix in _GUARDS:
            for m in pattern.finditer(body):
                i, n = m.group("i"), re.sub(r"\s+", " ", m.group("n")).strip()
                if i not in indices or i in _NOT_INDEX or re.fullmatch(r"\d+", n):
                    continue
                pos = start + m.start()
                line = line_of(sub.code, pos)
                if line in seen:
                    continue
                seen.add(line)
                s, e = _statement_span(sub.code, pos)
                said = quoted(sub, line, s, e)
                shown_n = re.sub(r"^\(\s*\w+(?:\s+\w+)?\s*\)\s*", "", n)
                through, write = (t.format(i=i, n=shown_n, whole=_whole(shown_n)) for t in fix)
                if direction == "past":
                    text = (f"line {line}: `{said}` lets {through} through, one past the end: write {write}")
                    found.append(Cause("guard_past_end", line, text, write.strip("`")))
                elif " on" in through:
                    text = (f"line {line}: `{said}` stops a whole row short: {through} is never let through, "
                            f"so the last row is never written: write {write}")
                    found.append(Cause("guard_stops_short", line, text, write.strip("`")))
                else:
                    lost = "the loop's last pass never runs" if re.match(r"(?:for|while)\b", said) else \
                        "its element is never written"
                    text = f"line {line}: `{said}` stops one short: {through} is never let through, so {lost}: write {write}"
                    found.append(Cause("guard_stops_short", line, text, write.strip("`")))
    return sorted(found, key=lambda c: c.line)


def pointer_params(body_start: int, code: str) -> set[str]:
    """The names of the function's pointer parameters (global memory), from its parameter list."""
    head_start = code.rfind("(", 0, body_start)
    # the parameter list: from the '(' matching the last ')' before the body
    close = code.rfind(")", 0, body_start)
    depth, i = 0, close
    while i >= 0:
        depth += {")": 1, "(": -1}.get(code[i], 0)
        if depth == 0:
            break
        i -= 1
    params = code[i + 1:close] if i >= 0 else code[head_start + 1:close]
    out = set()
    for p in params.split(","):
        m = re.search(r"\*\s*(?:__restrict__\s*|const\s*)*([A-Za-z_]\w*)\s*(?:\[[^\]]*\])?\s*$", p.strip())
        if m and "*" in p:
            out.add(m.group(1))
    return out


def _no_angles(code: str) -> str:
    """code without the angle brackets that are not comparisons: shifts, ->, a template's
    arguments (static_cast<size_t>(...), f<T>(...)), a launch's <<< >>>."""
    code = re.sub(r"<<<|>>>|<<|>>|->", lambda m: " " * len(m.group(0)), code)
    return re.sub(r"<[\w\s:*,]*>(?=\s*[(:])", lambda m: " " * len(m.group(0)), code)


def unguarded_index(sub: Submission) -> Cause | None:
    """A kernel that indexes memory with a thread's index it never compares with anything (no
    guard, no loop bound, no early return): the first line that does, where the last block's idle
    threads reach past the end."""
    for start, body in body_lines(sub):
        if not re.search(r"\b(?:threadIdx|blockIdx)\.[xyz]\b", body) or not pointer_params(start, sub.code):
            continue
        indices = index_names(body)
        spatial = index_names(body, roots=r"\bthreadIdx\.[xyz]\b")       # a thread's own, not its block's
        # every comparison's operands, between the delimiters around it (a shift and -> are not comparisons)
        operands = " ".join(m.group(0) for m in re.finditer(
            r"[^;(){}?:,&|]*(?<![<>\-])(?:<=?|>=?)(?![<>])[^;(){}?:,&|]*", _no_angles(body)))
        compared = any(re.search(rf"(?<![\w.]){re.escape(n)}\b", operands) for n in indices) or re.search(
            r"\b(?:threadIdx|blockIdx)\.[xyz]\b", operands)
        if compared or not spatial:
            continue
        for m in re.finditer(r"(?<![\w.])([A-Za-z_]\w*)\s*\[([^\[\];]*)\]", body):
            words = set(re.findall(r"[A-Za-z_]\w*", m.group(2)))
            if m.group(1) in pointer_params(start, sub.code) and words & spatial:
                line = line_of(sub.code, start + m.start())
                used = ", ".join(sorted(words & spatial))
                return Cause("unguarded", line, f"line {line}: `{quoted(sub, line)}` indexes {m.group(1)} with "
                                                f"{used}, which nothing compares with a bound: the last block's idle "
                                                f"threads reach past the end. Return first when the index is past it")
    return None


# ---------------------------------------------------------------------------
# Strides
# ---------------------------------------------------------------------------

# A column variable: the thread's global x index, `blockIdx.x * blockDim.x + threadIdx.x` in either order.
_COLUMN = re.compile(r"\b(\w+)\s*=\s*(?:[^;]*\bblockIdx\.x\b[^;]*\bthreadIdx\.x\b|[^;]*\bthreadIdx\.x\b[^;]*"
                     r"\bblockIdx\.x\b)[^;]*;")
# A column scaled into an element index: `col * sizeof(float)`, `col * 4`, `4 * col`.
_SCALE = r"(?:sizeof\s*\(\s*float\s*\)|[2-9]|1[0-9]+)"


_CASTED = r"(?:\(\s*[\w ]+\)\s*|static_cast<[\w ]+>\(\s*)?"


_WIDTHS = {"blockDim.x"}       # a block's width: the rows' distance apart only by chance


def _aliases(text: str) -> dict[str, str]:
    """Names assigned a single name or a block's width (`int stride = rows;`, `const size_t w =
    (size_t)blockDim.x;`), each to what it holds."""
    out = {}
    for m in re.finditer(rf"\b([A-Za-z_]\w*)\s*=(?!=)\s*{_CASTED}((?:blockDim|gridDim)\.[xy]|[A-Za-z_]\w*)\s*\)?\s*[;,]",
                         text):
        out[m.group(1)] = m.group(2)
    return out


def _padded(sub: Submission, text: str, n: int, by: str, row_length: str,
            dims: tuple[str, ...]) -> tuple[str, str] | None:
    """A row stepped (line n) by a name that holds the launch's padded width (strides.launch_width)."""
    if not dims or by == row_length or re.match(r"(?:blockDim|gridDim)\.", by):
        return None
    padded = launch_width(by, text, row_length=row_length, dims=dims)
    if padded is None:
        return None
    return ("row_stride", f"line {n} (`{quoted(sub, n)}`) steps from row to row by {by}, which holds `{padded[0]}` "
                          f"({padded[1]} where {row_length} is {PROBE}): consecutive rows are a row's length apart "
                          f"({row_length}), not the launch's padded width")


def index_strides(sub: Submission, *, row_length: str = "cols", dims: tuple[str, ...] = ()) -> tuple[str, str] | None:
    """What in the student's file steps through a row-major tensor with the wrong stride, as (code,
    text with the line), or None. row_length: the output's last dimension (the rows' distance
    apart); dims: the exercise's other dimensions (a row stepped by one of them is wrong), for a
    2-D output only.
    - row_stride: the row (from blockIdx.y) times anything but the row length: blockDim.x, another
      dimension (`row * rows`), a name holding one (`row * stride`), casts between.
    - col_stride: the guarded column scaled into an element index (`col * sizeof(float)`, `col * 4`),
      or the column times a dimension (`col * cols + row`). A vectorised kernel's `col4 * 4` is not
      this: its vector index is not the one compared with cols."""
    text = expand_object_macros(sub.code)       # the code the compiler sees: a macro's stride is its value
    code_lines = text.splitlines()
    rows = {m.group(1) for m in re.finditer(r"\b(\w+)\s*=\s*(?:static_cast<\w+>\(|\(\s*\w+\s*\))?\s*blockIdx\.y\b",
                                            text)}
    alias = _aliases(text)
    wrong = set(_WIDTHS) | {d for d in dims if d != row_length}
    row_terms = "|".join([r"blockIdx\.y"] + [re.escape(r) for r in rows])
    product = re.compile(rf"(?<![\w.])(?:{_CASTED})?\(?\s*(?:{_CASTED})?(?P<row>{row_terms})\s*\)?\s*\*\s*{_CASTED}"
                         rf"(?P<by>(?:blockDim|gridDim)\.[xy]\b|[A-Za-z_]\w*(?:\s*(?:\.|->)\s*[A-Za-z_]\w*)?\b"
                         rf"|\([^()]*\))(?!\s*[\[(])")
    for n, code in enumerate(code_lines, 1):
        for m in product.finditer(code):
            by = m.group("by")
            held = by if by in wrong else alias.get(by, by)
            if m.group("row") == "blockIdx.y" and held in _WIDTHS and re.match(r"\s*\+\s*threadIdx\.x\b",
                                                                            code[m.end():]):
                continue            # blockIdx.y * blockDim.x + threadIdx.x: a thread's index along y's blocks
            if held in wrong and by != row_length:
                said = by if held == by else f"{by} (which holds {held})"
                what = "the block's width" if held in _WIDTHS else f"the number of {held}" if held.endswith("s") \
                    else held
                return ("row_stride", f"line {n} (`{quoted(sub, n)}`) steps from row to row by {said}: consecutive "
                                      f"rows are a row's length apart ({row_length}), not {what}")
            padded = _padded(sub, text, n, by, row_length, dims) if held not in dims else None
            if padded is not None:
                return padded
    columns = {m.group(1) for m in _COLUMN.finditer(text)}
    guarded = {c for c in columns if re.search(rf"\b{re.escape(c)}\s*<\s*\w*{re.escape(row_length)}\b(?!\s*(?:/|>>))",
                                               text)}
    for n, code in enumerate(code_lines, 1):
        for c in sorted(guarded):
            m = re.search(rf"\b{re.escape(c)}\s*\*\s*(?P<k>{_SCALE})(?!\w)|(?<![\w.])(?P<k2>{_SCALE})\s*\*\s*"
                          rf"{re.escape(c)}\b|\([^()]*\b{re.escape(c)}\b[^()]*\)\s*\*\s*(?P<k3>{_SCALE})(?!\w)", code)
            if m and not re.search(rf"\b{re.escape(c)}\s*=", code):
                k = m.group("k") or m.group("k2") or m.group("k3")
                return ("col_stride", f"line {n} (`{quoted(sub, n)}`) steps from column to column by {k}: the "
                                      f"elements of a float tensor are one apart in the index (the pointer's type "
                                      f"counts the bytes), and with {c} up to {row_length} - 1 the index runs past "
                                      f"the row")
            if dims:
                m = re.search(rf"(?<![\w.]){_CASTED}{re.escape(c)}\s*\*\s*{_CASTED}(?P<d>[A-Za-z_]\w*)\b(?!\s*[\[(])",
                              code)
                d = m.group("d") if m else ""
                if m and (d in dims or d == row_length or alias.get(d, d) in dims) and not re.search(
                        rf"\b{re.escape(c)}\s*=", code):
                    return ("col_stride", f"line {n} (`{quoted(sub, n)}`) steps from column to column by "
                                          f"{m.group('d')}: in a row-major tensor consecutive columns are one "
                                          f"element apart, and rows {row_length} apart: row * {row_length} + {c}")
    return None


def one_based_index(sub: Submission, guard: Cause) -> Cause | None:
    """A loop numbered from 1 (`for (c = 1; c <= cols; ++c)`) whose body shifts the index back at
    some accesses (`bias[c - 1]`) and not at another (`x[row * cols + c]`): the guard is right for
    the numbering; the unshifted access is the mistake, one element late and past the end at the last."""
    lines = sub.code.splitlines()
    head = lines[guard.line - 1] if 0 < guard.line <= len(lines) else ""
    m = re.search(r"\bfor\s*\(\s*(?:int|unsigned|size_t|long)?\s*(?P<i>[A-Za-z_]\w*)\s*=\s*1\s*;\s*(?P=i)\s*<=", head)
    if m is None:
        return None
    i = m.group("i")
    shifted = unshifted = None
    for n in range(guard.line, min(len(lines), guard.line + 8) + 1):
        for a in re.finditer(r"\b[A-Za-z_]\w*\s*\[(?P<index>[^\]]*)\]", lines[n - 1] if n > guard.line else
                             lines[n - 1][m.end():]):
            if not re.search(rf"(?<![\w.]){i}\b", a.group("index")):
                continue
            if re.search(rf"(?<![\w.]){i}\s*-\s*1\b", a.group("index")):
                shifted = shifted or (n, a.group(0))
            elif unshifted is None:
                unshifted = (n, a.group(0))
    if shifted is None or unshifted is None:
        return None
    line, access = unshifted
    return Cause("shifted_index", line,
                 f"line {line} (`{quoted(sub, line)}`): {i} runs from 1 to the bound (line {guard.line}) and "
                 f"`{shifted[1]}` shifts it back, but `{access}` does not: it reads one element late, past the "
                 f"end at the last. Write {i} - 1 there too, or number {i} from 0 (`{i} = 0; {i} < ...`)")


def partial_warp_reduce(sub: Submission) -> Cause | None:
    """A shuffle reduction over a whole warp's lanes (the kernel strides its lanes by 32: `& 31`,
    `% 32`, `+= 32`, warpSize) whose loop starts below 16 with no width (`for (off = 8; off > 0;
    off >>= 1) v += __shfl_down_sync(mask, v, off)`): the upper lanes are never folded in."""
    code = sub.code
    if not re.search(r"&\s*31\b|%\s*32\b|\+=\s*32\b|\bwarpSize\b", code):
        return None
    loop = re.compile(r"\bfor\s*\(\s*(?:int|unsigned)?\s*(?P<o>[A-Za-z_]\w*)\s*=\s*(?P<k>\d+)\s*;[^;]*;[^)]*\)"
                      r"(?P<body>[^;]*?__shfl_(?:down|xor)_sync\s*\((?P<args>[^;]*)\)\s*;)")
    for m in loop.finditer(code):
        k = int(m.group("k"))
        if not 0 < k < 16 or len(split_args(m.group("args"))) != 3:
            continue
        line = line_of(code, m.start())
        return Cause("partial_warp_reduce", line,
                     f"line {line} (`{quoted(sub, line)}`): the shuffle reduction starts at offset {k}, so it folds "
                     f"in only lanes 0 to {2 * k - 1} of the warp's 32: the partial sums of lanes {2 * k} to 31 are "
                     f"never added. Start at 16 (`{m.group('o')} = 16`, or warpSize / 2)")
    return None

