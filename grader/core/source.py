"""Reading a submission's source: what it defines, and what it uses.

The scan works on the text with comments and string literals blanked out
(newlines kept, so line numbers still match the student's file). It is a
scan, not a parse: it finds `__global__ ... void NAME(` declarations, the
optional launcher, and constructs the CPU emulator cannot run.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from grader.core.signature import parse_param, split_params

MAX_SOURCE_BYTES = 256 * 1024


@dataclass(frozen=True)
class KernelDecl:
    name: str
    params: list[str]
    line: int


@dataclass(frozen=True)
class Finding:
    """Something in the source that stops one backend, with where it is."""

    what: str
    line: int


@dataclass
class Submission:
    path: Path
    text: str
    sha256: str
    code: str                       # comments and strings blanked
    kernels: list[KernelDecl] = field(default_factory=list)
    has_launcher: bool = False

    def kernel(self, name: str) -> KernelDecl | None:
        return next((k for k in self.kernels if k.name == name), None)


@dataclass(frozen=True)
class SourceProblem:
    """Why a file cannot be graded at all (a result, not an exception)."""

    message: str
    line: int | None = None


def read_submission(path: Path, launcher: str, signature: str = "") -> Submission | SourceProblem:
    """Read and scan a submission, or say why it is not a CUDA source we can grade. launcher: the
    optional launcher's name ("" when the exercise has none); signature: the kernel's, for the
    message about an empty file."""
    data = path.read_bytes()
    if not data.strip():
        return SourceProblem(f"{path.name} is empty: write the exercise's kernel in it:\n  {signature}" if signature
                             else f"{path.name} is empty: write a __global__ kernel in it.")
    if len(data) > MAX_SOURCE_BYTES:
        return SourceProblem(
            f"{path.name} is {len(data) / 1024:.0f} KiB; a submission may be at most {MAX_SOURCE_BYTES // 1024} KiB of source."
        )
    if b"\0" in data:
        return SourceProblem(f"{path.name} is a binary file, not CUDA source: submit the .cu text file.")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        return SourceProblem(f"{path.name} is not UTF-8 text (byte {exc.start}); save it as UTF-8.", line)
    code = blank_comments_and_strings(text)
    sub = Submission(path=path, text=text, sha256=hashlib.sha256(data).hexdigest(), code=code)
    sub.kernels = find_kernels(code)
    sub.has_launcher = bool(launcher) and defines_function(code, launcher)
    return sub


def defines_function(code: str, name: str) -> bool:
    """Whether code (comments and strings blanked) defines a function of that name (a body, not
    only a declaration or a call)."""
    return re.search(rf"\b{re.escape(name)}\s*\([^;{{]*\)\s*\{{", code, re.S) is not None


def blank_comments_and_strings(text: str) -> str:
    """Replace comments and string/char literals by spaces, keeping newlines."""
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
    return "".join(out)


_KERNEL_RE = re.compile(
    r"__global__\b(?:\s+__launch_bounds__\s*\([^)]*\))?[\s\w:]*?\bvoid\b"
    r"(?:\s+__launch_bounds__\s*\([^)]*\))?\s+(\w+)\s*\("
)


def _balanced(code: str, start: int) -> tuple[str, int]:
    """The text inside the parenthesis that opens at code[start-1]."""
    depth, i = 1, start
    while i < len(code) and depth:
        depth += {"(": 1, ")": -1}.get(code[i], 0)
        i += 1
    return code[start : i - 1], i


def find_kernels(code: str) -> list[KernelDecl]:
    seen: dict[str, KernelDecl] = {}
    for m in _KERNEL_RE.finditer(code):
        inside, _ = _balanced(code, m.end())
        decl = KernelDecl(m.group(1), split_params(inside), code.count("\n", 0, m.start()) + 1)
        seen.setdefault(decl.name, decl)
    return list(seen.values())


def missing_kernel_message(sub: Submission, name: str, signature: str) -> str:
    found = [k.name for k in sub.kernels]
    if not found:
        return (f"{sub.path.name} defines no __global__ kernel. Define this one:\n  {signature}")
    close = difflib.get_close_matches(name, found, n=1, cutoff=0.6)
    hint = f" Did you mean to name '{close[0]}' '{name}'?" if close else ""
    listed = ", ".join(f"'{k.name}' (line {k.line})" for k in sub.kernels)
    return f"{sub.path.name} has no kernel named '{name}'; it defines {listed}.{hint} The grader calls:\n  {signature}"


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

_COLLECTIVES = re.compile(
    r"\b(__syncthreads\w*|__syncwarp|__shfl\w*|__ballot_sync|__any_sync|__all_sync|__match\w*_sync|"
    r"this_thread_block|thread_block)\b"
)

_UNSUPPORTED = [
    (re.compile(r"\basm\b|\b__asm__\b"), "uses inline PTX"),
    (re.compile(r"\b(tex1D\w*|tex2D\w*|tex3D\w*|texture\s*<|cudaTextureObject_t|surf\dD\w*|cudaSurfaceObject_t)"),
     "uses textures or surfaces"),
    (re.compile(r"\b(this_grid|grid_group|this_multi_grid|multi_grid_group|tiled_partition|thread_block_tile|"
                r"coalesced_threads|coalesced_group|this_cluster|cluster_group|labeled_partition|binary_partition)\b|"
                r"cooperative_groups/"),
     "uses cooperative groups beyond a block's sync (grid groups, tiles, clusters)"),
    # The types need their headers: a variable named `half` (RoPE's half of a head) is not one.
    (re.compile(r"\b(__half2?|__nv_bfloat16\w*)\b|cuda_fp16\.h|cuda_bf16\.h"),
     "uses half or bfloat16 types"),
    (re.compile(r"\b__pipeline\w*|\bcp\.async|\bcuda::memcpy_async|\b__cluster\w*|\bcluster_dims\b"),
     "uses asynchronous copies or clusters"),
]


def uses_collectives(sub: Submission) -> bool:
    return _COLLECTIVES.search(sub.code) is not None


def device_bodies(code: str) -> list[tuple[int, str]]:
    """Each __global__ or __device__ function's body in code (blanked of comments and strings): where
    it starts, and its text, braces included."""
    bodies = []
    for k in re.finditer(r"__global__|__device__", code):
        body_start = code.find("{", k.end())
        semi = code.find(";", k.end())
        if body_start < 0 or (0 <= semi < body_start):
            continue                                    # a variable or a declaration
        depth, i = 1, body_start + 1
        while i < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[i], 0)
            i += 1
        bodies.append((body_start, code[body_start:i]))
    return bodies


# What lets one emulated thread see another's work other than through the global memory a correct
# kernel writes once, in the shim's own state: __shared__ arrays (function statics there) and atomics
# (plain read-modify-writes there) anywhere; in device code, the device heap's account, printf's
# order and clock64's counter (a launcher's own printf or malloc runs before or after the launch).
_SHARED_STATE = re.compile(r"\b(__shared__|atomic(?:[A-Z]\w*|_\w+)?)\b")
_SHARED_STATE_IN_DEVICE_CODE = re.compile(r"\b(malloc|free|printf|clock\w*)\b")
# A read-modify-write of memory in device code (out[i] += v, ++count[k], *p -= v): where two
# threads' elements coincide, a race, the result of a spread launch would depend on its timing,
# and one thread gives every run the same outcome. (A thread's own element updated in place is
# only emulated on one thread: slower, the same bits.)
_OP_ASSIGN = r"(?:[-+*/%&|^]|<<|>>)="
_READ_MODIFY_WRITE = re.compile(
    rf"\]\s*(?:{_OP_ASSIGN}|\+\+|--)"                         # out[i] += v, out[i]++
    rf"|(?:\+\+|--)\s*(?:\w+\s*\[|\*|\(\s*\*)"                  # ++out[i], ++*p, --(*p)
    rf"|(?:^|[^\w)\]\s])\s*\*\s*\w+\s*(?:{_OP_ASSIGN}|\+\+|--)"  # *p += v, *p++ = v
    rf"|\(\s*\*\s*\w+\s*\)\s*(?:{_OP_ASSIGN}|\+\+|--)"           # (*p) += v
    rf"|->\s*\w+\s*(?:{_OP_ASSIGN}|\+\+|--)", re.M)              # p->x += v


def device_variables(code: str) -> list[str]:
    """The names of the file's __device__ (and __managed__) variables: global memory every thread
    sees, declared `__device__ unsigned gCount = 0;` or `__device__ float gBuf[64];`."""
    names: list[str] = []
    for k in re.finditer(r"\b(?:__device__|__managed__)\b", code):
        semi = code.find(";", k.end())
        if semi < 0:
            continue
        declaration = code[k.end():semi]
        head = declaration.split("=", 1)[0]
        if "(" in head or "{" in head:
            continue                                    # a function: its declaration or its body
        while re.search(r"\{[^{}]*\}", declaration):   # initializers' braces, and the commas in them
            declaration = re.sub(r"\{[^{}]*\}", "", declaration)
        for part in declaration.split(","):
            m = re.search(r"([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*(?:=.*)?$", part.strip(), re.S)
            if m and m.group(1) not in ("__device__", "__managed__", "volatile", "const") and m.group(1) not in names:
                names.append(m.group(1))
    return names


def spreads_over_cores(sub: Submission) -> bool:
    """Whether the emulator may run a large launch's blocks on several OS threads at once: the file
    uses no collective, none of _SHARED_STATE, and its device code none of
    _SHARED_STATE_IN_DEVICE_CODE and no read-modify-write of memory (an array's element, a
    pointer's target, a __device__ variable). Any doubt keeps it on one thread, which is only
    slower: a kernel that is correct on a GPU gives the same bits either way."""
    if uses_collectives(sub) or _SHARED_STATE.search(sub.code):
        return False
    globals_ = device_variables(sub.code)
    updated = (re.compile(rf"\b(?:{'|'.join(map(re.escape, globals_))})\s*(?:{_OP_ASSIGN}|\+\+|--)|"
                          rf"(?:\+\+|--)\s*(?:{'|'.join(map(re.escape, globals_))})\b") if globals_ else None)
    return not any(_SHARED_STATE_IN_DEVICE_CODE.search(body) or _READ_MODIFY_WRITE.search(body)
                   or (updated is not None and updated.search(body))
                   for _, body in device_bodies(sub.code))


def emulator_blockers(sub: Submission) -> list[Finding]:
    found = []
    for pattern, what in _UNSUPPORTED:
        m = pattern.search(sub.code)
        if m:
            found.append(Finding(f"{what} ('{m.group(0).strip()}')", sub.code.count("\n", 0, m.start()) + 1))
    # A launch inside device code is dynamic parallelism.
    for body_start, body in device_bodies(sub.code):
        if "<<<" in body:
            off = body.index("<<<")
            found.append(Finding("launches a kernel from device code (dynamic parallelism)",
                                 sub.code.count("\n", 0, body_start + off) + 1))
            break
    return found


_CUDA_HEADERS = {
    "cuda_runtime.h", "cuda_runtime_api.h", "cuda.h", "device_launch_parameters.h",
    "device_functions.h", "math_constants.h", "vector_types.h", "cuda_device_runtime_api.h",
    "crt/host_defines.h", "math_functions.h", "sm_20_atomic_functions.h", "device_atomic_functions.h",
    "cooperative_groups.h",
}
_LAUNCH_RE = re.compile(r"([A-Za-z_][\w:]*(?:\s*<[^<>;()]*>)?)\s*<<<(.*?)>>>\s*\(", re.S)
# The cast before the kernel in cudaLaunchKernel((const void*)kernel, ...): dropped for the emulator,
# whose cudaLaunchKernel takes the kernel's own type (to know what its argument array holds).
_PACKED_LAUNCH_CAST_RE = re.compile(
    r"\bcudaLaunch(?:Cooperative)?Kernel\s*\(\s*(\(\s*(?:const\s+)?void\s*\*\s*\)|"
    r"reinterpret_cast\s*<\s*(?:const\s+)?void\s*\*\s*>)")
_EXTERN_SHARED_RE = re.compile(
    r"extern\s+__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s*)?([A-Za-z_][\w:\s]*?)\s+(?:__align__\s*\(\s*\d+\s*\)\s*)?(\w+)\s*\[\s*\]\s*;"
)


def rewrite_for_emulator(text: str) -> str:
    """Rewrite what g++ cannot read into calls of the shim, keeping every line where it was."""
    code = blank_comments_and_strings(text)
    edits: list[tuple[int, int, str]] = []
    for m in re.finditer(r"^[ \t]*#[ \t]*include[ \t]*[<\"]([^>\"]+)[>\"]", code, re.M):
        header = text[m.start(1) : m.end(1)].strip()
        if header in _CUDA_HEADERS:
            edits.append((m.start(), m.end(), ""))
    for m in _LAUNCH_RE.finditer(code):
        kernel, config = text[m.start(1) : m.end(1)], text[m.start(2) : m.end(2)]
        new = f"::grader::launch({kernel}, {config.strip()})("
        new += "\n" * (text[m.start() : m.end()].count("\n") - new.count("\n"))   # keep later lines in place
        edits.append((m.start(), m.end(), new))
    for m in _PACKED_LAUNCH_CAST_RE.finditer(code):
        edits.append((m.start(1), m.end(1), ""))
    for m in _EXTERN_SHARED_RE.finditer(code):
        tp, name = " ".join(m.group(1).split()), m.group(2)
        edits.append((m.start(), m.end(), f"{tp}* {name} = static_cast<{tp}*>(::grader::dynamic_shared());"))
    edits.sort()
    out, pos = [], 0
    for start, end, new in edits:
        if start < pos:
            continue
        out.append(text[pos:start])
        out.append(new)
        pos = end
    out.append(text[pos:])
    return "".join(out)


# ---------------------------------------------------------------------------
# Source-level limits on what a submission may contain
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


def source_refusals(sub: Submission) -> list[Finding]:
    """What the source itself may not contain: include paths that leave the file (they would
    read files into the compiler's messages), headers of the student's own (the submission
    is one file), and inline assembly in host code. Any system header by name is fine."""
    found: list[Finding] = []
    code, text = sub.code, sub.text
    for m in re.finditer(r"^[ \t]*#[ \t]*include\b(.*)$", code, re.M):
        line = code.count("\n", 0, m.start()) + 1
        raw = text[m.start(1) : m.end(1)].strip()
        inc = re.match(r"^([<\"])([^>\"]*)[>\"]", raw)
        if not inc:
            found.append(Finding(f"#include {raw}: a computed include; include CUDA and standard headers by name", line))
            continue
        name = inc.group(2).strip()
        if name.startswith("/") or ".." in name.split("/") or name.startswith("~"):
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
