"""What a build gives (BuildResult) and what the compiler said, read: its errors and warnings
(parse_messages), each kernel's registers, stack and spills (parse_ptxas), its static device
memory (parse_gmem), a kernel's plain name (demangle), and a failed build in the student's terms
(compile_message). No compiler runs here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from grader.core.backend import Api
from grader.core.signature import Signature
from grader.core.source import Submission


@dataclass
class KernelResources:
    """What ptxas reported for one kernel."""

    name: str
    registers: int | None = None
    stack_bytes: int | None = None
    spill_stores: int | None = None
    spill_loads: int | None = None
    shared_bytes: int | None = None


@dataclass
class CompilerMessage:
    file: str
    line: int | None
    severity: str          # "error" or "warning"
    text: str
    in_submission: bool


@dataclass
class BuildResult:
    ok: bool
    library: Path | None
    object: Path | None      # the compiled harness + submission, before linking: what screening reads
    cached: bool
    seconds: float
    command: str
    log: str = ""
    messages: list[CompilerMessage] = field(default_factory=list)
    resources: list[KernelResources] = field(default_factory=list)
    compiler: str = ""
    static_device_bytes: int = 0       # __device__ arrays and variables, from ptxas ("bytes gmem")
    # Where the build failed: the student's file compiled on its own (no harness), its output with
    # the file named as the student's, and its errors; "" and [] where it compiled on its own.
    alone_log: str = ""
    alone_messages: list[CompilerMessage] = field(default_factory=list)
    over_limit: bool = False           # stopped at the build's time, memory or file-size limit (limits.build_*)
    timed_out: bool = False            # at its time limit: the student's `timeout`, its stage named in the log
    confined: bool = False             # its compilers ran behind the build's file-system wall (toolchain/running.py)
    wall: str = ""                     # the wall's detail: "Landlock ABI 7", or why there was none
    wall_ms: float = 0.0               # what making the wall took, in the grader
    api: Api | None = None             # the runtime it was built against (its Backend's): what the screen and hints name


_NVCC_MSG = re.compile(r"^(?P<file>[^\s()]+)\((?P<line>\d+)\): (?P<sev>error|warning)( #\w+-D)?: (?P<text>.*)$")
_GCC_MSG = re.compile(r"^(?P<file>[^\s:]+):(?P<line>\d+):(?:\d+:)? (?P<sev>error|warning|fatal error): (?P<text>.*)$")


# Bounds on what the compiler said as the grader keeps and shows it (issue 70: a file that includes
# itself under #error with a long line made hundreds of megabytes of messages, in result.json and
# both reports): its first MESSAGES_KEPT diagnostics, each cut to MESSAGE_CHARS characters; in the
# student's compile error, LINE_CHARS a line, ALONE_LINES lines, and a source line shown through a
# window of SOURCE_COLUMNS around its caret.
MESSAGES_KEPT = 50
MESSAGE_CHARS = 300
LINE_CHARS = 200
SOURCE_COLUMNS = 72


def clip(text: str, limit: int) -> str:
    """text cut to its first limit characters, saying how many more there were."""
    return text if len(text) <= limit else f"{text[:limit]} [... {len(text) - limit} more characters]"


def parse_messages(log: str, directory: Path, user_path: str) -> list[CompilerMessage]:
    """Compiler diagnostics, with the cache copy of the submission named as the student's file: the
    first MESSAGES_KEPT, each cut to MESSAGE_CHARS."""
    out: list[CompilerMessage] = []
    for raw in log.splitlines():
        if len(out) >= MESSAGES_KEPT:
            break
        m = _NVCC_MSG.match(raw) or _GCC_MSG.match(raw)
        if not m:
            continue
        file = m.group("file")
        name = Path(file).name
        in_sub = name == "submission.cu" or (Path(file).resolve() == Path(user_path).resolve())
        shown = user_path if in_sub else ("the grader's harness" if name == "harness.cu" else file)
        sev = "error" if "error" in m.group("sev") else "warning"
        out.append(CompilerMessage(file=shown, line=int(m.group("line")), severity=sev,
                                   text=clip(m.group("text").strip(), MESSAGE_CHARS), in_submission=in_sub))
    return out


_PTXAS_ENTRY = re.compile(r"Compiling entry function '(\w+)'")
_PTXAS_PROPS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_USED = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")


def parse_ptxas(log: str) -> list[KernelResources]:
    found: list[KernelResources] = []
    current: KernelResources | None = None
    for line in log.splitlines():
        m = _PTXAS_ENTRY.search(line)
        if m:
            current = KernelResources(name=demangle(m.group(1)))
            found.append(current)
            continue
        if current is None:
            continue
        m = _PTXAS_PROPS.search(line)
        if m:
            current.stack_bytes, current.spill_stores, current.spill_loads = map(int, m.groups())
        m = _PTXAS_USED.search(line)
        if m:
            current.registers = int(m.group(1))
            if m.group(2):
                current.shared_bytes = int(m.group(2))
    return found


def parse_gmem(log: str) -> int:
    """Bytes of static __device__ memory ptxas reported (0 when it reported none)."""
    return max((int(m.group(1)) for m in re.finditer(r"(\d+) bytes gmem", log)), default=0)


def demangle(name: str) -> str:
    """The kernel's plain name from an Itanium-mangled one: the last name of a nested name, without
    namespaces or template arguments (_Z13biasGeluFusedPKfS0_Pfm -> biasGeluFused,
    _ZN12_GLOBAL__N_14kernILi64EEEvPKfS2_Pfm -> kern)."""
    if not name.startswith("_Z"):
        return name
    i = 2
    nested = name.startswith("N", i)
    if nested:
        i += 1
        while i < len(name) and name[i] in "rVKRO":        # cv- and ref-qualifiers of a member
            i += 1
    last = None
    while i < len(name) and (name[i].isdigit() or name[i] == "L"):      # L: internal linkage (static)
        if name[i] == "L":
            i += 1
            continue
        j = i
        while j < len(name) and name[j].isdigit():
            j += 1
        if j - i > 9:                       # no name is a billion characters long: not a mangled name
            return name
        n = int(name[i:j])
        last = name[j : j + n]
        i = j + n
        if not nested:
            break
    return last or name


_AT_END = re.compile(r"^At end of source: (?P<sev>error|warning): (?P<text>.*)$")
_MATCHING = re.compile(r"^(?P<file>[^\s()]+)\((?P<line>\d+)\): note #\d+-D: to match this")


def parse_alone(log: str, user_path: str) -> list[CompilerMessage]:
    """The diagnostics of the student's file compiled on its own (parse_messages), and nvcc's
    "At end of source" error (a missing closing brace), placed at the brace its note names."""
    name = Path(user_path).name
    out = []
    for m in parse_messages(log, Path("."), user_path):     # the log names the file by its own name
        if Path(m.file).name == name:
            m.file, m.in_submission = user_path, True
        out.append(m)
    lines = log.splitlines()
    for i, raw in enumerate(lines):
        m = _AT_END.match(raw)
        if not m:
            continue
        near = next((_MATCHING.match(ln) for ln in lines[i + 1: i + 3] if _MATCHING.match(ln)), None)
        out.append(CompilerMessage(file=user_path, line=int(near.group("line")) if near else None,
                                   severity="error" if m.group("sev") == "error" else "warning",
                                   text=clip(f"at the end of the file: {m.group('text')}", MESSAGE_CHARS)
                                        + (" (to match the { on this line)" if near else ""), in_submission=True))
    return out


ALONE_LINES = 40        # of the student's file's own compile, shown as the compiler printed it


def _named_end(line: str, name: str) -> str:
    """nvcc's "At end of source: error: ..." (a missing closing brace) with the file named, as every
    other line of the compile names it: the student's first line says which file."""
    m = _AT_END.match(line)
    return f"{name}: at the end of the file: {m.group('sev')}: {m.group('text')}" if m else line


# Headers that code brought from elsewhere includes and no toolkit ships: what to do instead.
_ELSEWHERE_HEADERS = [
    (re.compile(r"^helper_(cuda|functions|string|timer)\.h$"),
     "the CUDA samples' helper header (their Common/ folder), not part of the CUDA toolkit: define the check you "
     "need in your file, e.g. a macro that prints {error_check}"),
    (re.compile(r"^helper_math\.h$"),
     "the CUDA samples' float2/float4 operators (their Common/ folder), not part of the CUDA toolkit: write the "
     "arithmetic out per component (r.x = a.x + b.x, ...) or define the operators you use in your file"),
    (re.compile(r"^(common/)?book\.h$"),
     "CUDA by Example's helper (HANDLE_ERROR), not part of the CUDA toolkit: define the check you need in your file"),
    (re.compile(r"^cutil(_inline)?\.h$"),
     "the old CUDA SDK's helper, long gone from the toolkit: define the check you need in your file"),
]
_MISSING_HEADER = re.compile(r"(?:fatal error: |error: cannot open source file \")([\w./+-]+?)(?:: No such file|\")")


def _missing_header_hints(log: str, api: Api | None) -> list[str]:
    """For each header the compiler could not find that code from elsewhere brings, what it is
    (api: the runtime the build was against, whose error check a hint names)."""
    check = api.error_check if api is not None else "the last error's text"
    hints = []
    for name in dict.fromkeys(_MISSING_HEADER.findall(log)):
        for pattern, what in _ELSEWHERE_HEADERS:
            if pattern.match(name):
                hints.append(f"{name}: {what.format(error_check=check)}. The grader compiles your one file against "
                             "the CUDA toolkit's and the C++ library's headers only.")
    return hints


def compile_message(build: BuildResult, sub: Submission, *, expected: Signature | None = None) -> str:
    """The errors in the student's terms (_compile_errors), then what a header brought from
    elsewhere (the CUDA samples' helper_cuda.h, say) is and what to write instead. sub: the file as
    read and scanned once (its lines are quoted from it, never read again)."""
    hints = _missing_header_hints(build.alone_log + "\n" + build.log, build.api)
    return _compile_errors(build, sub, expected=expected) + "".join(f"\n{h}" for h in hints)


def _compile_errors(build: BuildResult, sub: Submission, *, expected: Signature | None = None) -> str:
    """The errors of a failed build in the student's terms. Where the file fails on its own, its
    own compile's first errors as the compiler printed them (file, line, the source line and a
    caret), with the harness's count left to the report: an unbalanced brace otherwise shows only
    errors in system headers and the harness. Where it compiles on its own, the build's errors
    (file, line, message, the source line; at most ten) after what the grader calls (expected)."""
    if build.alone_log.strip():
        shown = own_lines([_named_end(ln, sub.path.name) for ln in build.alone_log.strip().splitlines()
                           if not re.match(r"^\d+ errors? detected in the compilation of", ln)], sub)
        while shown and not shown[-1].strip():
            shown.pop()
        text = "\n".join(shown[:ALONE_LINES]) + (f"\n... ({len(shown) - ALONE_LINES} more lines)"
                                                 if len(shown) > ALONE_LINES else "")
        others = [m for m in build.messages if m.severity == "error" and not m.in_submission]
        if others:
            text += (f"\n({len(others)} more error(s) follow from the one(s) above, reported in the grader's harness "
                     "where it includes your file; they go when the above are fixed, and `grader submit`'s report "
                     "lists every message)")
        return text
    errors = [m for m in build.messages if m.severity == "error"]
    if errors and expected and not any(m.in_submission for m in errors):
        what = ("Declare it with exactly these parameter types, in this order." if not any(
            re.search(r"return type|ambiguating new declaration", m.text) for m in errors) else
                f"Declare it returning {expected.returns}, with exactly these parameter types, "
                "in this order.")
        head = (f"{sub.path.name} compiles on its own, but the grader's call of it does not. The grader calls:\n"
                f"    {expected.text}\n{what}\n")
    else:
        head = ""
    return head + _build_errors(build, sub, errors)


def _build_errors(build: BuildResult, sub: Submission, errors: list[CompilerMessage]) -> str:
    if not errors:
        return f"{sub.path.name} did not compile:\n" + "\n".join(clip(ln, LINE_CHARS) for ln in
                                                               build.log.strip()[-4000:].splitlines())
    lines = sub.text.splitlines()
    out = []
    for m in errors[:10]:
        loc = f"{m.file}:{m.line}" if m.line else m.file
        out.append(f"{loc}: error: {m.text}")
        if m.in_submission and m.line and 0 < m.line <= len(lines):
            out += _excerpt(lines[m.line - 1], None, gutter=f"    {m.line} | ")
    if len(errors) > 10:
        out.append(f"... and {len(errors) - 10} more errors")
    return "\n".join(out)


# A diagnostic's first line, gcc's (file:line:col: ...) or nvcc's (file(line): ...), and what each
# quotes beneath it: gcc "   12 | text" and "      |   ^~~", nvcc "  text" then "  ^".
_GCC_HEAD = re.compile(r"^(?P<file>[^\s:]+):(?P<line>\d+):(?:(?P<col>\d+):)? ")
_NVCC_HEAD = re.compile(r"^(?P<file>[^\s()]+)\((?P<line>\d+)\): ")
_GCC_QUOTED = re.compile(r"^ *\d+ \| (?P<text>.*)$")
_GCC_CARET = re.compile(r"^ *\| ")
_NVCC_CARET = re.compile(r"^ *\^ *$")


def own_lines(log: list[str], sub: Submission) -> list[str]:
    """A compiler's output as the student reads it: where it quotes a line of the student's file, the
    line as the student wrote it (the emulator compiles a rewritten copy: its __global__ is the shim's
    __attribute__((global))), through a window of SOURCE_COLUMNS around the caret, the caret kept
    only where the compiler quoted the line as written; every other line cut to LINE_CHARS."""
    lines = sub.text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(log):
        raw = log[i]
        i += 1
        gcc, nvcc = _GCC_HEAD.match(raw), _NVCC_HEAD.match(raw)
        head = gcc or nvcc
        out.append(clip(raw, LINE_CHARS))
        if head is None or Path(head.group("file")).name != sub.path.name:
            continue
        number = int(head.group("line"))
        quoted, col = None, None
        if gcc and i < len(log) and _GCC_QUOTED.match(log[i]):
            quoted = _GCC_QUOTED.match(log[i]).group("text")
            col = int(gcc.group("col")) if gcc.group("col") else None
            i += 1 + (i + 1 < len(log) and bool(_GCC_CARET.match(log[i + 1])))
        elif nvcc and i + 1 < len(log) and _NVCC_CARET.match(log[i + 1].expandtabs(8)):
            quoted = log[i].expandtabs(8)[2:]
            col = log[i + 1].expandtabs(8).index("^") - 1
            i += 2
        if quoted is None or not 0 < number <= len(lines):
            continue
        gutter, under = (f"{number:>5} | ", "      | ") if gcc else ("  ", "  ")      # each compiler's own style
        out += _excerpt(lines[number - 1], _own_column(quoted, lines[number - 1], col), gutter=gutter, under=under)
    return out


def _own_column(quoted: str, own: str, col: int | None) -> int | None:
    """The caret's column (1-based) in the student's own line, from col in the line the compiler
    quoted: the same where the two agree up to it, or where they agree from it to their ends (nvcc
    quotes a line with its macros expanded: __global__ as __attribute__((global))); else None."""
    quoted, own = quoted.expandtabs(8).rstrip(), own.expandtabs(8).rstrip()
    if col is None or not 0 < col <= len(quoted):
        return None
    if quoted[:col] == own[:col]:
        return col
    tail = quoted[col - 1:]
    return len(own) - len(tail) + 1 if own.endswith(tail) and len(own) >= len(tail) else None


def _excerpt(text: str, col: int | None, *, gutter: str, under: str = "") -> list[str]:
    """A line of the student's file (text) after gutter, through a window of SOURCE_COLUMNS around
    col (1-based, display columns) or from its start, and a caret under col after under, where known."""
    text = text.expandtabs(8).rstrip()
    start = 0
    if len(text) > SOURCE_COLUMNS and col is not None:
        start = min(max(0, col - 1 - SOURCE_COLUMNS // 2), len(text) - SOURCE_COLUMNS)
    shown = text[start:start + SOURCE_COLUMNS]
    before, after = ("..." if start else ""), ("..." if start + SOURCE_COLUMNS < len(text) else "")
    out = [f"{gutter}{before}{shown}{after}"]
    if col is not None and start < col <= start + SOURCE_COLUMNS:
        out.append(under + " " * (len(before) + col - 1 - start) + "^")
    return out
