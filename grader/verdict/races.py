"""The races behind a wrong (or order-dependent) output, with the student's own line: read from the
scanned source as verdict/causes.py reads the guards and the strides, and as conservative.

- lost_update: a read-modify-write of global memory (`out[k] += v`, `out[k] = out[k] + v`) at an
  index several threads share (`i % n`, `blockIdx.x`), not atomicAdd.
- missing_barrier: a __shared__ array written, then read at another thread's index with no
  __syncthreads() (or __syncwarp, a cooperative group's sync) between.
"""

from __future__ import annotations

import re

from grader.core.source import Submission
from grader.verdict.causes import Cause, body_lines, index_names, line_of, pointer_params, quoted

_BARRIER = re.compile(r"\b__syncthreads(?:_count|_and|_or)?\s*\(|\b__syncwarp\s*\(|\.\s*sync\s*\(|\bsync\s*\(|"
                      r"\bbar\.sync\b|\b__barrier_sync\s*\(")
_OP_ASSIGN = r"(?:[-+*/&|^]|<<|>>)="


def _derived(body: str, op: str) -> set[str]:
    """Names assigned an expression with op ('%' or '/') in it."""
    return {m.group(1) for m in re.finditer(rf"\b([A-Za-z_]\w*)\s*=(?!=)\s*([^;]*{re.escape(op)}[^;]*);", body)
            if "/" not in op or "//" not in m.group(2)}


def _single_thread_gate(body: str, pos: int) -> bool:
    """Whether the statement at pos is under a test that lets one thread through (`tid == 0`,
    `threadIdx.x == 0`, `lane == 0`) in the lines just above it."""
    before = body[max(0, body.rfind("\n", 0, max(0, pos - 1)) - 400):pos]
    return re.search(r"==\s*0\b|\b0\s*==|!\s*\w+\s*\)", before) is not None


def lost_update(sub: Submission) -> Cause | None:
    """A plain read-modify-write of global memory at an index several threads share: `out[i % n] +=
    v`, `out[k] = out[k] + v` with k from a % or /, `out[blockIdx.x] += v` with no one-thread test
    before it. atomicAdd never matches; a thread's own element (`out[i] += v`, i its own index) is
    no race."""
    for start, body in body_lines(sub):
        pointers = pointer_params(start, sub.code)
        if not pointers:
            continue
        threads = index_names(body)
        mods, divs = _derived(body, "%"), _derived(body, "/")
        names = "|".join(re.escape(p) for p in sorted(pointers))
        rmw = re.compile(rf"(?<![\w.])(?P<p>{names})\s*\[(?P<k>[^\[\];]*)\]\s*(?:{_OP_ASSIGN}|\+\+|--)"
                         rf"|(?<![\w.])(?P<p2>{names})\s*\[(?P<k2>[^\[\];]*)\]\s*=(?!=)\s*(?P=p2)\s*\[(?P=k2)\]")
        for m in rmw.finditer(body):
            k = m.group("k") if m.group("k") is not None else m.group("k2")
            words = set(re.findall(r"[A-Za-z_]\w*(?:\.[xyz])?", k))
            shared = None
            if "%" in k or "/" in k:
                shared = "an index with % or /"
            elif words & (mods | divs) and not (words & mods and words & divs):
                shared = "an index from a % or /"
            elif not (words & threads) and not any(w.startswith("threadIdx") for w in words) \
                    and not _single_thread_gate(body, m.start()):
                shared = "an index no thread owns alone"
            if shared is None:
                continue
            pos = start + m.start()
            line = line_of(sub.code, pos)
            name = m.group("p") or m.group("p2")
            return Cause("race_lost_update", line,
                         f"line {line}: `{quoted(sub, line)}` adds into {name}[{k.strip()}], an element several "
                         f"threads share, with a plain read-modify-write: two threads read the same old value and "
                         f"one addition is lost. Use atomicAdd(&{name}[{k.strip()}], ...)")
    return None


def _loop_bodies(body: str) -> list[tuple[int, int]]:
    """Where each braced for/while/do loop body in body starts and ends."""
    spans = []
    for m in re.finditer(r"\b(?:for|while)\s*\(|\bdo\s*\{", body):
        i = m.end() - 1
        if body[i] == "(":
            depth = 0
            while i < len(body):
                depth += {"(": 1, ")": -1}.get(body[i], 0)
                if depth == 0:
                    break
                i += 1
            rest = re.match(r"\s*\{", body[i + 1:])
            if rest is None:
                continue
            i = i + rest.end()
        depth, j = 0, i
        while j < len(body):
            depth += {"{": 1, "}": -1}.get(body[j], 0)
            if depth == 0:
                break
            j += 1
        spans.append((i, j))
    return spans


def missing_barrier(sub: Submission) -> Cause | None:
    """A __shared__ array written at one index, then read at another (another thread's slot) with no
    barrier between the two in the code."""
    for start, body in body_lines(sub):
        arrays = re.findall(r"__shared__\s+(?:[\w:]+\s+)+?(?:__align__\s*\(\s*\d+\s*\)\s*)?([A-Za-z_]\w*)\s*\[", body)
        if not arrays:
            continue
        own = {m.group(1) for m in re.finditer(r"\b([A-Za-z_]\w*)\s*=\s*(?:\(\s*\w+\s*\)\s*)?threadIdx\.x\s*;", body)}
        for name in dict.fromkeys(arrays):
            cause = _race_on(sub, start, body, name, own)
            if cause is not None:
                return cause
    return None


def _accesses(body: str, name: str, own: set[str]) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """The writes and the reads of the shared array name (where, and at which index, a thread's own
    index variable read as threadIdx.x); a compound assignment is both."""
    writes, reads = [], []
    for m in re.finditer(rf"(?<![\w.]){re.escape(name)}\s*\[(?P<k>[^\[\];]*)\]", body):
        after = body[m.end():m.end() + 4]
        k = re.sub(r"\s+", "", m.group("k"))
        for o in own:
            k = re.sub(rf"\b{re.escape(o)}\b", "threadIdx.x", k)
        if re.match(rf"\s*(?:{_OP_ASSIGN}|=(?!=))", after):
            writes.append((m.start(), k))
            if not re.match(r"\s*=(?!=)", after):
                reads.append((m.start(), k))
        else:
            reads.append((m.start(), k))
    return writes, reads


def _race_on(sub: Submission, start: int, body: str, name: str, own: set[str]) -> Cause | None:
    """A read of the shared array name at another thread's slot, written before it (in the code, or
    by the loop's pass before) with no barrier between."""
    writes, reads = _accesses(body, name, own)
    barriers = [m.start() for m in _BARRIER.finditer(body)]
    loops = _loop_bodies(body)
    for rpos, rk in reads:
        earlier = [(w, wk) for w, wk in writes if body.find(";", w) < rpos]
        # a loop with no barrier in it: its writes of one pass meet its reads of the next
        loop = min((span for span in loops if span[0] < rpos < span[1]), key=lambda sp: sp[1] - sp[0],
                   default=None)
        if loop is not None and not any(loop[0] < b < loop[1] for b in barriers):
            carried = [(w, wk) for w, wk in writes if loop[0] < w < loop[1] and wk != rk]
            if carried:
                rline, wline = line_of(sub.code, start + rpos), line_of(sub.code, start + carried[-1][0])
                return Cause("race_missing_barrier", rline,
                             f"line {rline}: `{quoted(sub, rline)}` reads {name}[{rk}], another thread's "
                             f"slot, which the loop writes (line {wline}) with no __syncthreads() in it: one "
                             f"pass may read before another thread wrote the pass before. Put __syncthreads() "
                             f"at the end of the loop's body, where every thread of the block reaches it")
        if not earlier:
            continue
        wpos, wk = earlier[-1]
        if rk == wk or any(wpos < b < rpos for b in barriers):
            continue
        rline, wline = line_of(sub.code, start + rpos), line_of(sub.code, start + wpos)
        return Cause("race_missing_barrier", rline,
                     f"line {rline}: `{quoted(sub, rline)}` reads {name}[{rk}], another thread's slot, "
                     f"written at line {wline} with no __syncthreads() between: it may read before that "
                     f"thread wrote. Put __syncthreads() after line {wline}, before the read")
    return None
