"""Memory of the student's own that a kernel accumulates into and nothing resets, read from the
scanned source (core.source.Submission: .code has comments and strings blanked, lines kept):

- unzeroed_workspace: a buffer from cudaMalloc (cudaMallocAsync, cudaMallocManaged) that a kernel
  adds into (atomicAdd, +=) with no cudaMemset of it: cudaMalloc's memory holds whatever was there,
  and the grader fills a workspace with NaN before every call, so the outputs show NaN;
- stale_workspace: a __device__ array at file scope that a kernel adds into and nothing sets back
  (no `name[i] = 0`, no cudaMemset or cudaMemcpyToSymbol of it): zero when the program loads, it
  carries each call's sums into the next, so a second run of the same case differs.

- unwritten_shared: the write that stages a __shared__ array (its first `name[...] =`), where the
  outputs carry the NaN the emulator fills each block's shared memory with (verdict/diagnosis.py's
  reads_unwritten_shared): the block reads elements that write never reached.

The verdict names them only where the outputs show it (NaN where the reference is finite; outputs
that change from one run of a case to the next); a scan cites the line, the outputs decide.
"""

from __future__ import annotations

import re

from grader.core.backend import CUDA_RUNTIME as _API  # the language every submission is written in
from grader.core.source import Submission
from grader.verdict.causes import Cause, body_lines, line_of, quoted

_MALLOC = re.compile(rf"\b{_API.allocate}(?:Async|Managed)?\s*\(\s*(?:\(\s*void\s*\*\s*\*\s*\)\s*)?&\s*(?P<name>[A-Za-z_]\w*)")
_DEVICE_ARRAY = re.compile(r"(?<!\w)__device__\s+(?!__)(?:[A-Za-z_][\w:<>]*\s+)+(?P<name>[A-Za-z_]\w*)\s*\[[^\]]*\]\s*;")


def _adds_into(sub: Submission, param_or_name: str) -> int | None:
    """The offset of the first addition into name[...] in device code (atomicAdd(&name[...]) or name[...] +=)."""
    n = re.escape(param_or_name)
    pattern = re.compile(rf"\batomic(?:Add|Sub)\w*\s*\(\s*&?\s*\(?\s*{n}\b|(?<![\w.]){n}\s*\[[^;]*?\]\s*[-+]=")
    for start, body in body_lines(sub):
        m = pattern.search(body)
        if m:
            return start + m.start()
    return None


def _kernel_params_for(sub: Submission, name: str) -> list[str]:
    """The parameter names a buffer passed to a kernel launch is known by inside that kernel."""
    params = []
    for launch in re.finditer(r"\b(?P<kernel>[A-Za-z_]\w*)\s*(?:<[^<>]*>)?\s*<<<[^;]*?>>>\s*\((?P<args>[^;]*)\)\s*;", sub.code):
        args = [a.strip() for a in launch.group("args").split(",")]
        if name not in args:
            continue
        k = args.index(name)
        decl = re.search(rf"__global__\s+void\s+{re.escape(launch.group('kernel'))}\s*\((?P<params>[^)]*)\)", sub.code)
        if decl:
            names = [re.findall(r"[A-Za-z_]\w*", p)[-1] for p in decl.group("params").split(",") if p.strip()]
            if k < len(names):
                params.append(names[k])
    return params


def unzeroed_workspace(sub: Submission) -> Cause | None:
    for m in _MALLOC.finditer(sub.code):
        name = m.group("name")
        if re.search(rf"\b{_API.memset}\w*\s*\(\s*\(?\s*(?:\(\s*void\s*\*\s*\)\s*)?{name}\b", sub.code):
            continue
        adds = next((a for a in (_adds_into(sub, p) for p in [name, *_kernel_params_for(sub, name)]) if a is not None),
                    None)
        if adds is None:
            continue
        line, at = line_of(sub.code, m.start()), line_of(sub.code, adds)
        return Cause("unzeroed_workspace", line,
                     f"line {line} (`{quoted(sub, line)}`): the workspace {name} is never zeroed before the kernel "
                     f"accumulates into it (line {at}: `{quoted(sub, at)}`): {_API.allocate}'s memory holds whatever "
                     f"was there, and the grader fills a workspace with NaN before every call to show it")
    return None


_SHARED = re.compile(r"\b__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s*)?(?:[A-Za-z_][\w:<>]*\s+)+?"
                     r"(?:__align__\s*\(\s*\d+\s*\)\s*)?(?P<name>[A-Za-z_]\w*)\s*[\[;]")


def _aliases(sub: Submission, name: str) -> list[str]:
    """name, and the pointers set from it (`float* sc = tables;`, `float* ss = tables + half;`)."""
    alias = re.compile(rf"\*\s*(?:const\s+)?(?:__restrict__\s+)?([A-Za-z_]\w*)\s*=\s*(?:\([^()]*\)\s*)?&?\s*{re.escape(name)}\b")
    return [name, *(a.group(1) for _, body in body_lines(sub) for a in alias.finditer(body))]


def unwritten_shared(sub: Submission) -> Cause | None:
    """The line that stages a __shared__ array the block then reads beyond: its first plain write
    (`tile[k] = ...`, or through a pointer set from it), or its declaration where nothing writes it."""
    for m in _SHARED.finditer(sub.code):
        name = m.group("name")
        names = "|".join(re.escape(n) for n in _aliases(sub, name))
        write = re.compile(rf"(?<![\w.])(?:{names})\s*(?:\[[^;]*?\]\s*)+=(?!=)|(?<![\w.]){re.escape(name)}\s*=(?!=)")
        at = next((start + w.start() for start, body in body_lines(sub) for w in [write.search(body)] if w), None)
        if at is None:
            line = line_of(sub.code, m.start())
            return Cause("reads_unwritten_shared", line,
                         f"line {line} (`{quoted(sub, line)}`): nothing writes the shared array {name} before the "
                         f"block reads it")
        line = line_of(sub.code, at)
        return Cause("reads_unwritten_shared", line,
                     f"line {line} (`{quoted(sub, line)}`): this is all that stages the shared array {name}, and the "
                     f"block reads elements of it this never wrote")
    return None


def stale_workspace(sub: Submission) -> Cause | None:
    for m in _DEVICE_ARRAY.finditer(sub.code):
        name = m.group("name")
        adds = _adds_into(sub, name)
        if adds is None:
            continue
        reset = (rf"(?<![\w.]){name}\s*\[[^;]*?\]\s*=\s*0(?:\.0*)?f?\s*;",
                 rf"\b{_API.memset}\w*\s*\([^;]*\b{name}\b", rf"\b{_API.to_symbol}\w*\s*\(\s*{name}\b")
        if any(re.search(r, sub.code) for r in reset):
            continue
        line = line_of(sub.code, adds)
        return Cause("stale_workspace", line,
                     f"line {line} (`{quoted(sub, line)}`): the sums are carried over between calls: {name} is a "
                     f"__device__ array that keeps its values from one call to the next, and nothing resets it "
                     f"before this call adds into it")
    return None
