"""The student's line behind a mistake a declared hypothesis named (verdict/hypotheses.py): the
outputs say what the formula computes (erf's argument scaled by 0.5, the bias added twice); this
says where, from the scanned source (core.source.Submission: .code has comments and strings blanked,
lines kept), guided by the variant's `at:` hints (exercises/schema.py, Variant.at), tried in order:

- a function's name (`erff`, `expf`, `pow`): the line of its first call, in a macro or a helper too;
- `store`: the last line writing an output in a __global__ body (an indexed assignment, a pointer
  write, an atomic) that is not a __shared__ array;
- `accumulate`: the first line adding into a plain variable (`acc += ...`) in device code;
- `seed`: the line declaring that variable with its first value (`float acc = gelu(x[idx]);`);
- `table`: the first line reading a cos/sin table (`cosTab[...]`);
- `position`: the line computing the variable that indexes that table (`pos = head;`);
- `rotation`: the first line, after the table reads, using both values read from the tables;
- `partner`: the line computing the offset a partner element is read at (`in[lo + offset]`: the
  line `offset = ...`), else that read's line.

A hint that finds nothing gives way to the next; none found, no line is cited (the message stays
what the outputs show). A scan, not a parse: it cites a line, it decides nothing.
"""

from __future__ import annotations

import re
from typing import Iterator

from grader.core.source import Submission
from grader.verdict.causes import body_lines, line_of, quoted

_ASSIGN = r"(?:[-+*/]?=)(?!=)"
_STORE = re.compile(rf"(?P<name>[A-Za-z_][\w.>-]*)\s*\[[^;\]]*(?:\[[^;\]]*\][^;\]]*)*\]\s*{_ASSIGN}"
                    rf"|\*\s*\(?\s*(?P<ptr>[A-Za-z_]\w*)[^;=]*\)?\s*{_ASSIGN}"
                    r"|\batomic\w+\s*\(")
_ACCUMULATE = re.compile(r"(?<![\w\].])(?P<name>[A-Za-z_]\w*)\s*\+=")
_TABLE = re.compile(r"\b(?P<name>\w*(?:cos|sin)\w*)\s*\[(?P<index>[^\]]*)\]", re.IGNORECASE)
_TABLE_VALUE = re.compile(r"\b(?P<var>[A-Za-z_]\w*)\s*=\s*(?:\(\s*float\s*\)\s*)?\w*(?:cos|sin)\w*\s*\[",
                          re.IGNORECASE)
_WORD = re.compile(r"[A-Za-z_]\w*")


def formula_line(sub: Submission, at: list[str]) -> int | None:
    """The line the first hint that finds one names (store where none is given); None where none does."""
    for hint in at or ["store"]:
        found = _FINDERS.get(hint, _call)(sub, hint)
        if found is not None:
            return found
    return None


def with_line(sub: Submission, line: int, message: str) -> str:
    """The message with the line and its text before it: 'line 7 (`out[i] = ...`): erf's argument ...'."""
    return f"line {line} (`{quoted(sub, line)}`): {message}"


def _last(matches: Iterator[re.Match]) -> re.Match | None:
    """The last of the matches (None: there are none)."""
    found = list(matches)
    return found[-1] if found else None


def _call(sub: Submission, name: str) -> int | None:
    m = re.search(rf"(?<![\w.]){re.escape(name)}\s*\(", sub.code)
    return line_of(sub.code, m.start()) if m else None


def _kernels(sub: Submission) -> list[tuple[int, str]]:
    """The __global__ bodies (a helper's body is a __device__ one)."""
    return [(start, body) for start, body in body_lines(sub)
            if sub.code.rfind("__global__", 0, start) > sub.code.rfind("__device__", 0, start)]


def _shared_names(sub: Submission) -> set[str]:
    return set(re.findall(r"__shared__[^;\[]*?\b([A-Za-z_]\w*)\s*\[", sub.code))


def _store(sub: Submission, _hint: str) -> int | None:
    shared, last = _shared_names(sub), None
    for start, body in _kernels(sub) or body_lines(sub):
        for m in _STORE.finditer(body):
            name = (m.group("name") or m.group("ptr") or "").split(".")[0].split("->")[0]
            if name in shared:
                continue
            last = line_of(sub.code, start + m.start())
    return last


def _accumulated(sub: Submission) -> tuple[int, str] | None:
    for start, body in body_lines(sub):
        m = _ACCUMULATE.search(body)
        if m:
            return start + m.start(), m.group("name")
    return None


def _accumulate(sub: Submission, _hint: str) -> int | None:
    found = _accumulated(sub)
    return line_of(sub.code, found[0]) if found else None


def _seed(sub: Submission, _hint: str) -> int | None:
    found = _accumulated(sub)
    if found is None:
        return None
    pos, name = found
    seeds = [m for m in re.finditer(rf"\b(?:float|double|auto)\s+{name}\s*=\s*(?P<value>[^;]+);", sub.code[:pos])]
    if not seeds or re.fullmatch(r"\s*0(?:\.0*)?f?\s*", seeds[-1].group("value")):
        return None                 # a sum that starts at zero starts right
    return line_of(sub.code, seeds[-1].start())


def _table(sub: Submission, _hint: str) -> int | None:
    m = _TABLE.search(sub.code)
    return line_of(sub.code, m.start()) if m else None


def _position(sub: Submission, _hint: str) -> int | None:
    m = _TABLE.search(sub.code)
    if m is None:
        return None
    words = [w for w in _WORD.findall(m.group("index")) if not w.startswith(("half", "size", "int"))]
    for w in words[:1]:
        d = _last(re.finditer(rf"(?<![\w.]){w}\s*=(?!=)", sub.code[:m.start()]))
        if d is not None:
            return line_of(sub.code, d.start())
    return None


def _rotation(sub: Submission, _hint: str) -> int | None:
    values = list(_TABLE_VALUE.finditer(sub.code))
    if len(values) < 2:
        return None
    a, b = values[0].group("var"), values[1].group("var")
    after = sub.code.find("\n", values[1].end())
    for m in re.finditer(r"[^\n]*\n?", sub.code[after:]):
        words = set(_WORD.findall(m.group(0)))
        if a in words and b in words:
            return line_of(sub.code, after + m.start() + 1)
    return None


def _partner(sub: Submission, _hint: str) -> int | None:
    for start, body in _kernels(sub) or body_lines(sub):
        reads = [(m.start(), m.group("name"), re.sub(r"\s+", "", m.group("index")))
                 for m in re.finditer(r"\b(?P<name>[A-Za-z_]\w*)\s*\[(?P<index>[^\]]*)\]", body)]
        for pos, name, index in reads:
            first = next((i for _, n, i in reads if n == name and index.startswith(i + "+")), None)
            if first is None:
                continue
            offset = index[len(first) + 1:]
            d = None
            if re.fullmatch(r"[A-Za-z_]\w*", offset):
                d = _last(re.finditer(rf"(?<![\w.]){offset}\s*=(?!=)", body[:pos]))
            return line_of(sub.code, start + (d.start() if d is not None else pos))
    return None


_FINDERS = {"store": _store, "accumulate": _accumulate, "seed": _seed, "table": _table, "position": _position,
            "rotation": _rotation, "partner": _partner}
