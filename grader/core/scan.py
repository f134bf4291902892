"""The scan of a CUDA source's text, on which core/source.py reads a submission: comments and
string literals blanked (newlines kept, so line numbers still match the student's file), the file's
object-like macros expanded, the `__global__ ... void NAME(` declarations found with their
parameters, whether a function is defined and whether a __device__ lambda is written. A scan, not
a parse. core/source.py imports every name here: callers import them from there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from grader.core.signature import split_params


@dataclass(frozen=True)
class KernelDecl:
    name: str
    params: list[str]
    line: int


# A lambda with an execution space: `[] __device__ (float v) {`, `[=] __host__ __device__ (`.
_DEVICE_LAMBDA = re.compile(r"\]\s*(?:__host__\s+)?__device__\b|\]\s*__device__\s+__host__\b")


def uses_device_lambdas(code: str) -> bool:
    """Whether code (comments and strings blanked) writes a __device__ (or __host__ __device__)
    lambda, which nvcc builds only with --extended-lambda."""
    return _DEVICE_LAMBDA.search(code) is not None


def defines_function(code: str, name: str) -> bool:
    """Whether code (comments and strings blanked) defines a function of that name (a body, not
    only a declaration or a call), object-like macros expanded (`#define LAUNCHER void`)."""
    return re.search(rf"\b{re.escape(name)}\s*\([^;{{]*\)\s*\{{", expand_object_macros(code), re.S) is not None


_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)(?![\w(])[ \t]*((?:\\\n|[^\n])*)", re.M)


def expand_object_macros(code: str, rounds: int = 4) -> str:
    """code with the file's object-like macros expanded (`#define KERNEL __global__`, `#define
    RESTRICT __restrict__`) and its #define lines blanked, newlines kept: what the scan for kernels
    and a launcher reads, as the compiler will. Function-like macros are left as written."""
    defines = {m.group(1): " ".join(m.group(2).replace("\\\n", " ").split()) for m in _DEFINE.finditer(code)}
    scan = _DEFINE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), code)
    if not defines:
        return scan
    use = re.compile(r"\b(" + "|".join(map(re.escape, sorted(defines, key=len, reverse=True))) + r")\b")
    for _ in range(rounds):                     # a macro naming another, a few deep; one naming itself stops
        expanded = use.sub(lambda m: defines[m.group(1)], scan)
        if expanded == scan:
            break
        scan = expanded
    return scan


def blank_comments_and_strings(text: str) -> str:
    """Replace comments, string/char literals (raw strings included) and the bodies of `#if 0`
    blocks by spaces, keeping newlines. A digit separator (`65'535`) is not a literal's quote."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"' and _raw_string_at(text, i):
            m = _RAW_OPEN.match(text, i + 1)
            close = text.find(")" + m.group(1) + '"', m.end())
            j = n if close < 0 else close + len(m.group(1)) + 2
            out.append('"' + re.sub(r"[^\n]", " ", text[i + 1:j - 1]) + ('"' if close >= 0 else text[j - 1:j]))
            i = j
        elif c == "'" and _in_number(text, i):
            out.append(c)                           # a digit separator: part of the number
            i += 1
        elif c in "\"'":
            # keep #include "file" visible: blank only the literal's inside
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + (c if j < n and text[j] == c else ""))
            i = j + 1 if j < n and text[j] == c else j
        else:
            out.append(c)
            i += 1
    return _blank_if0("".join(out))


_RAW_OPEN = re.compile(r'([^()\\\s"]{0,16})\(')


def _raw_string_at(text: str, i: int) -> bool:
    """Whether the quote at text[i] opens a raw string literal: R"delim( ... )delim", after R, u8R,
    uR, UR or LR that is not the end of a longer name."""
    if i < 1 or text[i - 1] != "R" or not _RAW_OPEN.match(text, i + 1):
        return False
    start = i - 1
    for prefix in ("u8", "u", "U", "L"):
        if text.endswith(prefix, 0, start):
            start -= len(prefix)
            break
    return start == 0 or not (text[start - 1].isalnum() or text[start - 1] == "_")


def _in_number(text: str, i: int) -> bool:
    """Whether the quote at text[i] is a digit separator: inside a number (C++14: 65'535, 0xFF'FF)."""
    if i < 1 or i + 1 >= len(text) or not text[i - 1].isalnum() or not text[i + 1].isalnum():
        return False
    k = i - 1
    while k > 0 and (text[k - 1].isalnum() or text[k - 1] in "'._"):
        k -= 1
    return text[k].isdigit()


_DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*(\w+)[ \t]*(.*?)[ \t]*$")


def _directive(line: str) -> tuple[str, str]:
    """A preprocessor line's word and the rest ("if", "0"), or ("", "") for any other line."""
    m = _DIRECTIVE.match(line)
    return (m.group(1), m.group(2)) if m else ("", "")


def _blank_if0(code: str) -> str:
    """The lines inside `#if 0` (up to its #else, #elif or #endif) blanked: code never compiled,
    kept out of the scans as a comment is (the directives themselves stay)."""
    if "#" not in code:
        return code
    lines = code.split("\n")
    dead_from = None                                # depth at which an #if 0 began
    depth = 0
    for k, line in enumerate(lines):
        word, rest = _directive(line)
        if word in ("if", "ifdef", "ifndef"):
            depth += 1
            if dead_from is None and word == "if" and rest == "0":
                dead_from = depth
                continue
        elif word == "endif":
            if dead_from == depth:
                dead_from = None
            depth = max(0, depth - 1)
            continue
        elif word in ("else", "elif") and dead_from == depth:
            dead_from = None
            continue
        if dead_from is not None:
            lines[k] = " " * len(line)
    return "\n".join(lines)


def live_lines(code: str) -> list[bool]:
    """For each line, whether the preprocessor surely compiles it: outside every #if, or under
    conditions the file itself settles (an include guard's #ifndef, #if 1, #ifdef of a name it
    defined before). A line under any other condition (#ifdef of a name the file never defines, a
    compiler's version test) may be dropped by the compiler, so nothing there is refused ahead of
    it (code under `#if 0` is blanked from the scan altogether: scan.blank_comments_and_strings)."""
    defined: set[str] = set()
    stack: list[bool] = []                  # each open condition: True where surely taken
    out = []
    for line in code.split("\n"):
        word, rest = _directive(line)
        if word in ("if", "ifdef", "ifndef"):
            name = rest.split()[0] if rest.split() else ""
            sure = (word == "if" and rest == "1") or (word == "ifdef" and name in defined) or (
                word == "ifndef" and name not in defined and not name.startswith("_"))
            stack.append(sure)
        elif word in ("else", "elif") and stack:
            stack[-1] = False                   # which branch is taken is the compiler's to say
        elif word == "endif" and stack:
            stack.pop()
        surely = all(stack)
        if word == "define" and surely and rest.split():
            defined.add(re.split(r"[(\s]", rest, maxsplit=1)[0])
        out.append(surely)
    return out


# __launch_bounds__'s arguments, a parenthesised macro's expansion among them: `((256))`, `((2 * (64)))`
_BOUNDS = r"__launch_bounds__\s*\((?:[^()]|\((?:[^()]|\([^()]*\))*\))*\)"
_KERNEL_RE = re.compile(
    rf"(?:__global__\b(?:\s+{_BOUNDS})?[\s\w:]*?\bvoid\b|\bvoid\s+__global__\b)"
    rf"(?:\s+{_BOUNDS})?\s+(\w+)\s*\("
)


def balanced(code: str, start: int) -> tuple[str, int]:
    """The text inside the parenthesis that opens at code[start-1]."""
    depth, i = 1, start
    while i < len(code) and depth:
        depth += {"(": 1, ")": -1}.get(code[i], 0)
        i += 1
    return code[start : i - 1], i


def find_kernels(code: str) -> list[KernelDecl]:
    """The __global__ functions code (comments and strings blanked) declares, object-like macros
    expanded, each once, with its parameters and line."""
    code = expand_object_macros(code)
    seen: dict[str, KernelDecl] = {}
    for m in _KERNEL_RE.finditer(code):
        inside, _ = balanced(code, m.end())
        decl = KernelDecl(m.group(1), split_params(inside), code.count("\n", 0, m.start()) + 1)
        seen.setdefault(decl.name, decl)
    return list(seen.values())
