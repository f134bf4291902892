"""Screening a compiled submission before anything loads it: fairness first.

The harness and the submission are compiled to an object file; this module
reads it (nm, readelf) and refuses only what would cheat the timing or what
the grader cannot grade. It is not the security wall: a submission can reach
any function at run time without importing it, so the operating system stops
hostile code (grader/run/child/guard.c). Here a submission is refused when it:

- calls CUDA runtime (or driver) functions the replay cannot reproduce or that
  would change what the floor measures: stream creation, host, managed or
  pooled memory, 2D/3D and peer copies, L2 persistence and device limits,
  graphs and host callbacks, the driver's cuLaunchKernelEx (whose attributes can set
  cache policy; the runtime's cudaLaunchKernelEx is recorded, and refused only with
  attributes). The launcher's memsets, copies, copies to symbols, cudaMalloc'd
  workspace, events and synchronisation are recorded and replayed instead
  (grader/run/child/replay.py);
- runs code when the library loads: a file-scope initialiser that calls a
  function (other than the C++ and CUDA runtime's own start-up), or an
  __attribute__((constructor)).

Everything else is accepted: host functions of any kind (helpers, templates,
namespaces, nvcc's stubs for __device__ functions), read-only runtime
queries, the occupancy API, cudaFuncSetAttribute, host printf.

A refusal names what the student wrote, with the line where it appears in
their file when it does, and what to do instead. Nothing here runs the
submission's code: it is read as an ELF file.
"""

from __future__ import annotations

import functools
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from grader.core.backend import Api
from grader.core.objmemo import read_beside
from grader.core.source import Submission
from grader.toolchain import tools
from grader.toolchain.tools import require as find_tool

_MATH = {f + s for f in ("sqrt", "cbrt", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "pow", "sin",
                         "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh", "erf", "erfc",
                         "tgamma", "lgamma", "ceil", "floor", "round", "trunc", "fmod", "fma", "fmin", "fmax",
                         "fabs", "hypot", "ldexp", "frexp", "copysign") for s in ("", "f")}


@dataclass(frozen=True)
class Refusal:
    """One thing the submission may not do, said in its own terms."""

    what: str               # as the student wrote it: "cudaStreamCreate()", "a file-scope initialiser"
    reason: str
    line: int | None = None

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line else ""
        return f"{where}{self.what} {self.reason}"


def _run(*args: str) -> str:
    return subprocess.run(list(args), capture_output=True, text=True, check=True).stdout


def unresolved_calls(obj: Path, name: str) -> tuple[list[str], list[str]]:
    """(the functions called name the object defines, those it calls and does not define), each
    demangled with its parameter types: a launcher defined with other parameters than the harness
    calls it with is a second overload, and the call is left to the loader, which fails."""
    def named(rows) -> list[str]:
        return sorted({d for _, d, _ in rows if d == name or d.startswith(name + "(")})

    return named(_symbols(obj, undefined=False)), named(_symbols(obj, undefined=True))


def _symbols(obj: Path, *, undefined: bool) -> list[tuple[str, str, str]]:
    """(mangled, demangled, type) of the object's defined (or undefined) symbols."""
    return [tuple(r) for r in read_beside(obj, "undefined" if undefined else "defined",
                                           lambda: _list_symbols(obj, undefined))]


def _list_symbols(obj: Path, undefined: bool) -> list[tuple[str, str, str]]:
    out = _run(find_tool("nm"), "-P", "--undefined-only" if undefined else "--defined-only", str(obj))
    rows = [line.split() for line in out.splitlines() if line.strip()]
    mangled = [(r[0], r[1]) for r in rows if len(r) >= 2]
    if not mangled:
        return []
    names = [m for m, _ in mangled]
    filt = tools.locate("c++filt")
    demangled = (subprocess.run([filt], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
                 if filt else names)
    if len(demangled) != len(names):
        demangled = names
    return [(m, d, t) for (m, t), d in zip(mangled, demangled, strict=False)]


def _relocation_targets(obj: Path, section: str) -> list[str]:
    """Symbols referenced by relocations of one section ('.init_array', '.text.startup')."""
    return [target for _, target in _relocations(obj, section)]


def _relocations(obj: Path, section: str) -> list[tuple[str, str]]:
    """(relocation type, symbol) of each relocation of one section."""
    out = read_beside(obj, "relocations", lambda: _run(find_tool("readelf"), "-rW", str(obj)))
    found, inside = [], False
    for line in out.splitlines():
        if line.startswith("Relocation section"):
            inside = f"'.rela{section}'" in line or f"'.rel{section}'" in line
            continue
        if inside:
            cols = line.split()
            if len(cols) >= 5 and re.match(r"^[0-9a-f]{8,}$", cols[0]):
                found.append((cols[2], cols[4]))
    return found


# The relocations of a call (or a tail call's jump); any other one in start-up code takes an
# address: a destructor's, handed to __cxa_atexit for the exit.
_CALL_RELOCATIONS = frozenset({"R_X86_64_PLT32", "R_X86_64_PLT", "R_AARCH64_CALL26", "R_AARCH64_JUMP26"})


# The standard library building a file-scope object (a long std::string, a map from a list, a
# clock read): it runs inside the wall, in the recorder, which replays none of it and refuses any
# launch or copy made outside a launcher's call; a thread started at load is refused here, early.
_STANDARD_LIBRARY = re.compile(r"^(std|__gnu_cxx)::")
_STARTS_A_THREAD = re.compile(r"thread|async")


def _standard_library(name: str) -> bool:
    """A plain name of the C++ standard library's own code, other than what starts a thread."""
    return bool(_STANDARD_LIBRARY.match(name)) and not _STARTS_A_THREAD.search(name)


def _registered_destructor(kind: str, demangled: str) -> bool:
    """A file-scope object's destructor whose address start-up code registers to run at exit
    (`static std::vector<float> cache;`): nothing of it runs when the library loads."""
    return kind not in _CALL_RELOCATIONS and "::~" in _plain(demangled)


_OPERATOR = re.compile(r"operator(<<=|>>=|<=>|<<|>>|<=|>=|->\*?|<|>|\(\))")


def _plain(demangled: str) -> str:
    """A function's qualified name without parameters, template arguments or clone suffixes
    (`std::vector<float, std::allocator<float> >::~vector()` is std::vector::~vector)."""
    name = demangled.replace("(anonymous namespace)::", "").split(" [clone", 1)[0]
    operators: list[str] = []

    def keep(m: re.Match) -> str:                      # operator<< is a name, not a template bracket
        operators.append(m.group(0))
        return f"\0{len(operators) - 1}\0"

    name, depth, plain = _OPERATOR.sub(keep, name), 0, []
    for ch in name:
        if ch == "<":
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
        elif not depth:
            plain.append(ch)
    name = "".join(plain).split("(", 1)[0].strip()
    if " " in name:
        name = name.rsplit(" ", 1)[-1]
    name = re.sub(r"\0(\d+)\0", lambda m: operators[int(m.group(1))], name)
    return re.sub(r"(_ptsz|_ptds|_v\d)$", "", name.split("@", 1)[0])


def _line_of(sub: Submission, name: str) -> int | None:
    """The first line of the student's file that names this function (or its un-suffixed form)."""
    for candidate in (name, re.sub(r"C$", "", name)):
        m = re.search(rf"\b{re.escape(candidate)}\b", sub.code)
        if m:
            return sub.code.count("\n", 0, m.start()) + 1
    return None


def _initialiser_line(sub: Submission, name: str) -> int | None:
    """The line of a file-scope `... = name(...)`, else the first that names it."""
    m = re.search(rf"=[^;{{}}]*\b{re.escape(name.rsplit('::', 1)[-1])}\s*\(", sub.code)
    return sub.code.count("\n", 0, m.start()) + 1 if m else _line_of(sub, name)


def _kernel_symbol(demangled: str, sub: Submission) -> bool:
    base = _plain(demangled).rsplit("::", 1)[-1]
    return base.startswith("__device_stub__") or any(k.name == base for k in sub.kernels)


def screen_object(obj: Path, *, sub: Submission, api: Api, shim_baseline: Path | None = None) -> list[Refusal]:
    """Refusals for the compiled harness object; an empty list means it may be loaded. api: the
    runtime the object was built against (its Backend's), whose calls are refused by its own rules.

    shim_baseline: for a backend that compiles against a CPU shim (Toolchain.shim: the emulator's
    object, screened only where the checking toolchain is missing), the shim alone compiled the
    same way; its own start-up calls are allowed. There kernels are host functions and the runtime
    calls inline, so only load-time code can be found, and the emulator times nothing.
    """
    allowed = set(_relocation_targets(shim_baseline, ".text.startup")) if shim_baseline is not None else set()
    return _startup_refusals(obj, sub, api, also_ok=allowed) + _timing_refusals(obj, sub, api)


@functools.cache
def _rules(api: Api) -> tuple[tuple[re.Pattern, str], ...]:
    """api.refused compiled once: (a pattern on an imported function's plain name, why)."""
    return tuple((re.compile(pattern), reason) for pattern, reason in api.refused)


@functools.cache
def _startup_ok(api: Api) -> tuple[re.Pattern, re.Pattern]:
    """What the runtime's own start-up calls, and its own entries in .init_array (api.startup)."""
    return re.compile(rf"^({api.startup})$"), re.compile(rf"^({api.startup_entries})")


def refused_call(api: Api, name: str) -> bool:
    """Whether the screen refuses an imported function of this plain name (api.refused)."""
    return any(pattern.match(name) for pattern, _ in _rules(api))


def _timing_refusals(obj: Path, sub: Submission, api: Api) -> list[Refusal]:
    found: dict[str, Refusal] = {}
    for _mangled, name, _kind in _symbols(obj, undefined=True):
        plain = _plain(name)
        for pattern, reason in _rules(api):
            if pattern.match(plain) and plain not in found:
                found[plain] = Refusal(f"{plain}()", reason, _line_of(sub, plain))
    return sorted(found.values(), key=lambda r: (r.line or 1 << 30, r.what))


def _startup_refusals(obj: Path, sub: Submission, api: Api, also_ok: set[str] = frozenset()) -> list[Refusal]:
    """Code that runs when the library loads, beyond the runtimes' own start-up (and, for the
    emulator's g++ object, beyond what the shim's own initialisers call: also_ok)."""
    defined = {m: (d, t) for m, d, t in _symbols(obj, undefined=False)}
    imported = {m: d for m, d, _ in _symbols(obj, undefined=True)}
    refusals: list[Refusal] = []
    startup_ok, entry_ok = _startup_ok(api)
    for target in _relocation_targets(obj, ".init_array"):
        # Start-up code sits in .text.startup, whose calls are judged below; an entry
        # anywhere else is a constructor compiled some other way.
        if target == ".text.startup" or entry_ok.match(target):
            continue
        name = _plain(defined.get(target, (target, ""))[0]) if not target.startswith(".") else "a function"
        refusals.append(Refusal(f"{name}()", "is a constructor (__attribute__((constructor))) that runs when the "
                                "library loads: call it from your launcher instead", _line_of(sub, name)))
    called = set()
    for relocation, target in _relocations(obj, ".text.startup"):
        if target.startswith(".") or startup_ok.match(target) or target in _MATH or target in also_ok:
            continue
        if target in defined:
            demangled, kind = defined[target]
            if kind not in "TtWwi" or _kernel_symbol(demangled, sub) or _registered_destructor(relocation, demangled):
                continue                         # data, a kernel being registered, a destructor for the exit
            name = _plain(demangled)
        else:
            demangled = imported.get(target, target)
            name = _plain(demangled)
            if name in _MATH or _registered_destructor(relocation, demangled):
                continue
        if _standard_library(name):
            continue
        called.add(name)
    for name in sorted(called):
        refusals.append(Refusal(f"a file-scope initialiser calling {name}()",
                                "runs code when the library loads (e.g. `static int x = f();`): compute such "
                                "values in your launcher, or make them constexpr", _initialiser_line(sub, name)))
    return refusals


def refusal_message(file_name: str, refusals: list[Refusal]) -> str:
    lines = [f"{file_name} was not run: it does what would change the timing or cannot be graded."]
    lines += [f"  - {file_name}:{r.line}: {r.what} {r.reason}" if r.line else f"  - {r}" for r in refusals[:8]]
    if len(refusals) > 8:
        lines.append(f"  ... and {len(refusals) - 8} more")
    return "\n".join(lines)
