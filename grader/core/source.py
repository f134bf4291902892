"""Reading a submission's source: what it defines, and what it uses.

The scan (scan.py, its names imported from here) works on the text with comments
and string literals blanked out (newlines kept, so line numbers still match the
student's file). It is a scan, not a parse: it finds `__global__ ... void NAME(`
declarations and the optional launcher; here, what a submission may not include
and why a file cannot be graded; what the CPU emulator needs from the text is
emulation.py.
"""

from __future__ import annotations

import difflib
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

from grader.core.handin import READ_LIMIT, SourceFile, read_file
from grader.core.scan import (  # noqa: F401 - the scan's names, from the source's front door (callers import them here)
    KernelDecl,
    balanced,
    blank_comments_and_strings,
    defines_function,
    expand_object_macros,
    find_kernels,
    live_lines,
    uses_device_lambdas,
)
from grader.core.signature import parse_param

MAX_SOURCE_BYTES = READ_LIMIT


@dataclass(frozen=True)
class Finding:
    """Something in the source that stops one backend, with where it is."""

    what: str
    line: int


@dataclass
class Submission:
    """A source scanned (read_submission): path is the file as read once (a HeldPath, reading as
    the bytes scanned), text and sha256 those bytes'."""

    path: Path
    text: str
    sha256: str
    code: str                       # comments and strings blanked
    kernels: list[KernelDecl] = field(default_factory=list)
    has_launcher: bool = False
    main_span: tuple[int, int] | None = None    # a main() the grader leaves out (_unused_main), in code

    def kernel(self, name: str) -> KernelDecl | None:
        return next((k for k in self.kernels if k.name == name), None)

    @property
    def main_line(self) -> int | None:
        """The line where a main() the grader leaves out starts."""
        return self.code.count("\n", 0, self.main_span[0]) + 1 if self.main_span else None

    @property
    def compiled(self) -> str:
        """What is compiled: the text, with a main() that nothing else names blanked out (lines kept)."""
        if self.main_span is None:
            return self.text
        start, end = self.main_span
        return self.text[:start] + re.sub(r"[^\n]", " ", self.text[start:end]) + self.text[end:]


@dataclass(frozen=True)
class SourceProblem:
    """Why a file cannot be graded at all (a result, not an exception)."""

    message: str
    line: int | None = None


def read_submission(path: Path | SourceFile, launcher: str, signature: str = "") -> Submission | SourceProblem:
    """Scan a submission, or say why it is not a CUDA source we can grade. path: the file as read
    once (core/handin.py's SourceFile: a batch's, a grade's), or a path, read here the way
    `grader submit` reads one (handin.read_file: its last component not followed; UsageError where
    it cannot be read). launcher: the optional launcher's name ("" when the exercise has none);
    signature: the kernel's, for the message about an empty file."""
    source = path if isinstance(path, SourceFile) else read_file(Path(path))
    path, data = source.path, source.data
    if not data.strip():
        return SourceProblem(f"{path.name} is empty: write the exercise's kernel in it:\n  {signature}" if signature
                             else f"{path.name} is empty: write a __global__ kernel in it.")
    if source.size > MAX_SOURCE_BYTES or len(data) > MAX_SOURCE_BYTES:
        return SourceProblem(
            f"{path.name} is {source.size / 1024:.0f} KiB; a submission may be at most {MAX_SOURCE_BYTES // 1024} KiB of source."
        )
    if b"\0" in data:
        return SourceProblem(f"{path.name} is a binary file, not CUDA source: submit the .cu text file.")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        return SourceProblem(f"{path.name} is not UTF-8 text (byte {exc.start}); save it as UTF-8.", line)
    code, kernels = scanned(text)
    python = _python_around_cuda(code)
    if python is not None:
        shown = text.splitlines()[python - 1].strip()
        return SourceProblem(
            f"{path.name}:{python}: `{shown}` is Python, not CUDA: this looks like a PyTorch extension's Python "
            "file with the CUDA source in a string. Save what is inside the string (the kernels) as the .cu file, "
            "drop the PyTorch wrapper and load_inline, and add the launcher the exercise calls"
            + (f" ({launcher})." if launcher else "."), python)
    sub = Submission(path=path, text=text, sha256=source.sha256, code=code)
    sub.kernels = list(kernels)
    if not sub.kernels and path.suffix == ".py":
        return SourceProblem(f"{path.name} is a Python file: the grader grades CUDA C++, a .cu file with a __global__ "
                             "kernel (and, where the exercise asks, its launcher). Write the kernel in a .cu file and "
                             "submit that.")
    sub.has_launcher = bool(launcher) and defines_function(code, launcher)
    sub.main_span = _unused_main(code)
    return sub


# `int main(...) {`, with the specifiers that may stand before it, at the start of a declaration.
_MAIN = re.compile(r"(?:^|(?<=[;}\n]))[ \t]*((?:(?:static|inline|extern[ \t]*\"[ \t]*\"|__host__)\s+)*int\s+main\s*\()")


def _unused_main(code: str) -> tuple[int, int] | None:
    """The span of a file-scope main() that nothing else in the file names, or None: the student's
    own test driver (a few inputs, a timing, a printf), which the grader never calls. Compiled, it
    would still be read as if it could run: g++ puts main in .text.startup, beside the code that
    runs when a library loads, and its calls (a stream, pinned memory for a test) in the object's
    imports. code: comments and strings blanked."""
    for m in _MAIN.finditer(code):
        start = m.start(1)
        if _depth(code, start):
            continue
        _, after = balanced(code, m.end(1))
        body = re.match(r"\s*\{", code[after:])
        if body is None:
            return None                                  # a declaration, or something this scan does not read
        depth, i = 1, after + body.end()
        while i < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[i], 0)
            i += 1
        if depth:
            return None
        outside = code[:start] + code[i:]
        return (start, i) if not re.search(r"\bmain\b", outside) else None
    return None


def _depth(code: str, at: int) -> int:
    """How many braces are open at code[at]."""
    return code.count("{", 0, at) - code.count("}", 0, at)


# Lines only a Python file has at its start: an import of torch (or of load_inline), a
# load_inline( call, a name bound to a triple-quoted string.
_PYTHON_LINE = re.compile(r"^[ \t]*(?:(?:import|from)[ \t]+torch\b.*|from[ \t]+\w[\w.]*[ \t]+import[ \t]+.*"
                          r"|\w+[ \t]*=[ \t]*load_inline[ \t]*\(.*|\w+[ \t]*=[ \t]*[rRuUbB]?(?:\"\"\"|\'\'\').*)$", re.M)


def _python_around_cuda(code: str) -> int | None:
    """The line of the first Python statement in a file that pastes a CUDA source string with its
    Python around it, or None. code: comments blanked, so Python quoted in a C++ comment is not
    Python; two such lines are needed (a C++ file has none of them)."""
    found = list(_PYTHON_LINE.finditer(code))
    return code.count("\n", 0, found[0].start()) + 1 if len(found) >= 2 else None


@functools.lru_cache(maxsize=512)
def scanned(text: str) -> tuple[str, tuple[KernelDecl, ...]]:
    """A source's code with comments and strings blanked, and the kernels it declares: worked out
    once per text (the exercise's choice, the grade's read_submission and the emulator's rewrite
    take the same scan of the same bytes; a class of up to 512 files is scanned once a file)."""
    code = blank_comments_and_strings(text)
    return code, tuple(find_kernels(code))


def missing_kernel_message(sub: Submission, kernel) -> str:
    """Why a file without the exercise's kernel is not graded (kernel: the rubric's Kernel). With
    the launcher that is only because the exercise asks for the name; without it, the default
    launch calls the kernel, and the launcher is the other way in."""
    name, signature = kernel.name, kernel.signature
    found = [k.name for k in sub.kernels]
    close = difflib.get_close_matches(name, found, n=1, cutoff=0.6)
    hint = f" Your '{close[0]}' is close: should it be named '{name}'?" if close else ""
    listed = ", ".join(f"'{k.name}' (line {k.line})" for k in sub.kernels)
    defines = f"it defines {listed}" if found else "it defines no __global__ kernel"
    if sub.has_launcher:
        return (f"{sub.path.name} has no kernel named '{name}'; {defines}.{hint} This exercise asks for its kernel "
                f"by that name: name the kernel your {kernel.launcher_name} launches '{name}' (its parameters are "
                f"yours to choose, as your launcher passes them):\n  {signature}")
    other_way = (f"\nOr define the launcher and launch your own kernels from it, whatever they are called:\n  "
                 f"{kernel.launcher.rstrip(';')} {{ ... }}" if kernel.launcher and not kernel.name_required else "")
    if not found:
        return f"{sub.path.name} defines no __global__ kernel. Define this one:\n  {signature}{other_way}"
    return (f"{sub.path.name} has no kernel named '{name}'; {defines}.{hint} Without a launcher the grader "
            f"launches the kernel by its name:\n  {signature}{other_way}")


def signature_problem(decl: KernelDecl, kernel) -> str | None:
    """Why the default launch cannot call this kernel (kernel: the rubric's Kernel), or None if it
    can. Fair to what compiles: an input may drop its const, an integer may be any integer type."""
    want = kernel.parsed.params
    problem = None
    if len(decl.params) != len(want):
        problem = f"takes {len(decl.params)} parameters; the default launch passes {len(want)}"
    else:
        for text, w in zip(decl.params, want):
            try:
                got = parse_param(text)
            except ValueError:
                problem = f"has a parameter the grader cannot read: {text!r}"
                break
            if w.pointer != got.pointer or (w.pointer and got.element != w.element):
                problem = f"takes {text!r} where the default launch passes {w.ctype} {w.name}"
                break
            if w.pointer and got.const_data and not w.const_data:
                problem = f"takes {text!r}, a pointer to const, for the output {w.name}"
                break
            if not w.pointer and w.integer and not got.integer:
                problem = f"takes {text!r} where the default launch passes the integer {w.name}"
                break
    if problem is None:
        return None
    how = (f" Change the parameters, or define {kernel.launcher.rstrip(';')} and launch your kernel from it."
           if kernel.launcher else " Change the parameters.")
    return (f"{kernel.name} (line {decl.line}) takes ({', '.join(decl.params)}): it {problem}. The default launch "
            f"calls:\n  {kernel.signature}\n" + how.strip())


# ---------------------------------------------------------------------------
# What the CPU emulator needs to know
# ---------------------------------------------------------------------------

_CPP_HEADERS = set("""algorithm any array atomic bit bitset cassert cctype cerrno cfenv cfloat charconv chrono cinttypes
climits clocale cmath complex concepts cstdarg cstddef cstdint cstdio cstdlib cstring ctime cuchar cwchar cwctype
deque exception functional initializer_list iomanip ios iosfwd iostream istream iterator limits list map memory
new numbers numeric optional ostream queue random ratio set span sstream stack stdexcept string string_view
tuple type_traits typeinfo unordered_map unordered_set utility valarray variant vector version""".split())
_C_HEADERS = set("""assert.h ctype.h errno.h fenv.h float.h inttypes.h limits.h locale.h math.h stdarg.h stdbool.h
stddef.h stdint.h stdio.h stdlib.h string.h time.h wchar.h""".split())
_CUDA_HEADER = re.compile(
    r"^(cuda[\w.]*\.h|cuda_\w+\.h|device_\w+\.h|math_constants\.h|vector_types\.h|vector_functions\.h|"
    r"sm_\d+_\w+\.h|mma\.h|curand_kernel\.h|cooperative_groups\.h|cooperative_groups/\w+\.h|cub/[\w/.]+|"
    r"thrust/[\w/.]+|cuda/[\w/]+|crt/\w+\.h|texture_\w+\.h|surface_\w+\.h)$")


# Headers of a PyTorch extension: the grader compiles plain CUDA, and nvcc takes over two minutes
# on torch/extension.h alone (139 s against 1.6 s for a plain file, measured on the CI's machine).
_TORCH_HEADER = re.compile(r"^(torch/|ATen/|c10/|pybind11/|Python\.h$|caffe2/)")


def torch_header_advice(include: str, launcher: str) -> str:
    """What to do about a PyTorch extension's header, in one line (launcher: the exercise's
    launcher signature, or "")."""
    then = f" and define the launcher the grader calls: {launcher.rstrip(';')} {{ ... }}" if launcher else ""
    return (f"#include {include}: a PyTorch extension header; the grader compiles plain CUDA without PyTorch. Keep "
            f"your kernels, drop the PyTorch wrapper (the torch::Tensor function, TORCH_CHECK, PYBIND11_MODULE){then}")


def source_refusals(sub: Submission, *, launcher: str = "") -> list[Finding]:
    """What the source itself may not contain: include paths that leave the file (they would
    read files into the compiler's messages), headers of the student's own (the submission
    is one file), PyTorch's extension headers (answered with what to keep; launcher: the
    exercise's launcher signature) and inline assembly in host code. Any system header by name
    is fine."""
    found: list[Finding] = []
    code, text = sub.code, sub.text
    live = live_lines(code)
    for m in re.finditer(r"^[ \t]*#[ \t]*include\b(.*)$", code, re.M):
        line = code.count("\n", 0, m.start()) + 1
        if not live[line - 1]:          # under a condition that may be false: the compiler decides
            continue
        raw = text[m.start(1) : m.end(1)].strip()
        inc = re.match(r"^([<\"])([^>\"]*)[>\"]", raw)
        if not inc:
            found.append(Finding(f"#include {raw}: a computed include; include CUDA and standard headers by name", line))
            continue
        name = inc.group(2).strip()
        if _TORCH_HEADER.match(name):
            found.append(Finding(torch_header_advice(inc.group(0), launcher), line))
        elif name.startswith("/") or ".." in name.split("/") or name.startswith("~"):
            found.append(Finding(f"#include {inc.group(0)}: a path outside the submission; include CUDA and "
                                 "standard headers only", line))
        elif inc.group(1) == '"' and not (name in _CPP_HEADERS or name in _C_HEADERS or _CUDA_HEADER.match(name)):
            found.append(Finding(f"#include {inc.group(0)}: a header of your own; a submission is one "
                                 "self-contained .cu file, so paste what you need from it into the file", line))
    for start, end in _host_spans(code):
        m = re.search(r"\b(asm|__asm__|__asm)\b", code[start:end])
        if m:
            found.append(Finding("inline assembly in host code: assembly belongs in device code only",
                                 code.count("\n", 0, start + m.start()) + 1))
            break
    return found


def _host_spans(code: str) -> list[tuple[int, int]]:
    """Spans of the code outside __global__ and __device__-only function bodies."""
    spans: list[tuple[int, int]] = []

    def walk(lo: int, hi: int) -> None:
        i, boundary, host_from = lo, lo, lo
        while i < hi:
            ch = code[i]
            if ch in ";}":
                boundary = i + 1
            elif ch == "{":
                depth, j = 1, i + 1
                while j < hi and depth:
                    depth += {"{": 1, "}": -1}.get(code[j], 0)
                    j += 1
                header = code[boundary:i]
                if re.search(r"\bnamespace\b|extern\s*\"", header):
                    spans.append((host_from, i + 1))
                    walk(i + 1, j - 1)
                    host_from = j - 1
                elif re.search(r"__global__", header) or (re.search(r"__device__", header)
                                                           and not re.search(r"__host__", header)):
                    spans.append((host_from, i))
                    host_from = j
                i, boundary = j, j
                continue
            i += 1
        spans.append((host_from, hi))

    walk(0, len(code))
    return [(a, b) for a, b in spans if b > a]


__all__ = ["Finding", "KernelDecl", "MAX_SOURCE_BYTES", "SourceProblem", "Submission", "blank_comments_and_strings",
           "defines_function", "expand_object_macros", "find_kernels", "missing_kernel_message", "read_submission",
           "scanned", "signature_problem", "source_refusals", "torch_header_advice", "uses_device_lambdas"]
