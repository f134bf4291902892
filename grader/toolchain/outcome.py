"""What a build gives (BuildResult) and what the compiler said, read: its errors and warnings
(parse_messages), each kernel's registers, stack and spills (parse_ptxas), its static device
memory (parse_gmem), a kernel's plain name (demangle), and a failed build in the student's terms
(compile_message). No compiler runs here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path


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


_NVCC_MSG = re.compile(r"^(?P<file>[^\s()]+)\((?P<line>\d+)\): (?P<sev>error|warning)( #\w+-D)?: (?P<text>.*)$")
_GCC_MSG = re.compile(r"^(?P<file>[^\s:]+):(?P<line>\d+):(?:\d+:)? (?P<sev>error|warning|fatal error): (?P<text>.*)$")


def parse_messages(log: str, directory: Path, user_path: str) -> list[CompilerMessage]:
    """Compiler diagnostics, with the cache copy of the submission named as the student's file."""
    out = []
    for raw in log.splitlines():
        m = _NVCC_MSG.match(raw) or _GCC_MSG.match(raw)
        if not m:
            continue
        file = m.group("file")
        name = Path(file).name
        in_sub = name == "submission.cu" or (Path(file).resolve() == Path(user_path).resolve())
        shown = user_path if in_sub else ("the grader's harness" if name == "harness.cu" else file)
        sev = "error" if "error" in m.group("sev") else "warning"
        out.append(CompilerMessage(file=shown, line=int(m.group("line")), severity=sev,
                                   text=m.group("text").strip(), in_submission=in_sub))
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
        n = int(name[i:j])
        last = name[j : j + n]
        i = j + n
        if not nested:
            break
    return last or name


def compile_message(build: BuildResult, p: Path) -> str:
    """The errors of a failed build in the student's terms: file, line, nvcc's (or g++'s) message
    and the line of source it points at; at most ten."""
    errors = [m for m in build.messages if m.severity == "error"]
    if not errors:
        return f"{p.name} did not compile:\n{build.log.strip()[-4000:]}"
    lines = p.read_text(errors="replace").splitlines()
    out = []
    for m in errors[:10]:
        loc = f"{m.file}:{m.line}" if m.line else m.file
        out.append(f"{loc}: error: {m.text}")
        if m.in_submission and m.line and 0 < m.line <= len(lines):
            out.append(f"    {m.line} | {lines[m.line - 1].rstrip()}")
    if len(errors) > 10:
        out.append(f"... and {len(errors) - 10} more errors")
    return "\n".join(out)
