"""What the CPU emulator needs from a submission's text: whether its kernels use block-wide
collectives (each block then runs on fibers), whether a large launch may spread over the cores,
what the emulator cannot run (emulator_blockers), and the source rewritten for g++ and the shim
(rewrite_for_emulator). A scan of the blanked text (source.py), not a parse.
"""

from __future__ import annotations

import re

from grader.core.backend import CUDA_RUNTIME as _API  # the language the emulator runs, through its shim
from grader.core.source import Finding, Submission, scanned

_COLLECTIVES = re.compile(
    r"\b(__syncthreads\w*|__syncwarp|__shfl\w*|__ballot_sync|__any_sync|__all_sync|__match\w*_sync|"
    r"this_thread_block|thread_block)\b"
)

_UNSUPPORTED = [
    (re.compile(r"\basm\b|\b__asm__\b"), "uses inline PTX"),
    (re.compile(r"\b(tex1D\w*|tex2D\w*|tex3D\w*|texture\s*<|surf\dD\w*|" + "|".join(_API.texture_types) + ")"),
     "uses textures or surfaces"),
    (re.compile(r"\b(this_grid|grid_group|this_multi_grid|multi_grid_group|tiled_partition|thread_block_tile|"
                r"coalesced_threads|coalesced_group|this_cluster|cluster_group|labeled_partition|binary_partition)\b|"
                r"cooperative_groups/"),
     "uses cooperative groups beyond a block's sync (grid groups, tiles, clusters)"),
    # The types need their headers: a variable named `half` (RoPE's half of a head) is not one.
    (re.compile(r"\b(__half2?|__nv_bfloat16\w*)\b|cuda_fp16\.h|cuda_bf16\.h"),
     "uses half or bfloat16 types"),
    # cudaLaunchKernelEx itself runs; its attributes (a cache policy, a cluster) the GPU's grader refuses too
    (re.compile(rf"\b{_API.launch_attribute}\w*"),
     f"sets launch attributes for {_API.launch_ex} (the grader refuses them on a GPU too: leave config.attrs "
     "empty)"),
    (re.compile(r"\b__pipeline\w*|\bcp\.async|\bcuda::memcpy_async|\b__cluster\w*|\bcluster_dims\b"),
     "uses asynchronous copies or clusters"),
    # thrust's, CUB's and libcu++'s headers are written for nvcc's two passes, not for g++ and a shim.
    (re.compile(r"^[ \t]*#[ \t]*include[ \t]*[<\"](?:thrust|cub|cuda)/[^>\"]*[>\"]", re.M),
     "uses thrust, CUB or libcu++"),
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


# The same read-modify-write spelled as an assignment that reads its own target: out[o] = out[o] + v.
_ASSIGNED_ELEMENT = re.compile(r"\b(\w+)\s*\[([^\[\]=;]+)\]\s*=(?!=)([^;]*)")


def _reads_its_own_target(body: str) -> bool:
    """An element at an index several threads may share (one folded by % or /, or a variable set so)
    assigned from an
    expression that reads that same element (the index compared without its spaces): a
    read-modify-write _READ_MODIFY_WRITE does not see. A thread's own element, o[i] = 2 * o[i],
    shares nothing and still spreads."""
    folded = {v.group(1) for v in re.finditer(r"\b(\w+)\s*=(?!=)[^;]*[%/][^;]*;", body)}   # o = i % n
    for m in _ASSIGNED_ELEMENT.finditer(body):
        name, index = m.group(1), re.sub(r"\s+", "", m.group(2))
        if not re.search(r"[%/]", index) and index not in folded:
            continue
        for r in re.finditer(rf"\b{re.escape(name)}\s*\[([^\[\]]+)\]", m.group(3)):
            if re.sub(r"\s+", "", r.group(1)) == index:
                return True
    return False


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
                   or _reads_its_own_target(body) or (updated is not None and updated.search(body))
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
# A kernel's template arguments may hold template arguments of their own, two levels deep
# (kern<Vec<4>, 128>, kern<Pair<Vec<2>>>).
_TEMPLATE_ARGS = r"<(?:[^<>;()]|<(?:[^<>;()]|<[^<>;()]*>)*>)*>"
_LAUNCH_RE = re.compile(r"((?:::\s*)?[A-Za-z_][\w:]*(?:\s*" + _TEMPLATE_ARGS + r")?)\s*<<<(.*?)>>>\s*\(", re.S)
# The cast before the kernel in cudaLaunchKernel((const void*)kernel, ...): dropped for the emulator,
# whose cudaLaunchKernel takes the kernel's own type (to know what its argument array holds).
_PACKED_LAUNCH_CAST_RE = re.compile(
    rf"\b(?:{_API.launch}|{_API.launch_cooperative})\s*\(\s*(\(\s*(?:const\s+)?void\s*\*\s*\)|"
    r"reinterpret_cast\s*<\s*(?:const\s+)?void\s*\*\s*>)")
# CUDA's __noinline__ where the student writes it as a specifier (not inside an __attribute__).
_NOINLINE_RE = re.compile(r"(?<!\()\b__noinline__\b")
_EXTERN_SHARED_RE = re.compile(
    r"extern\s+__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s*)?([A-Za-z_][\w:\s]*?)\s+(?:__align__\s*\(\s*\d+\s*\)\s*)?(\w+)\s*\[\s*\]\s*;"
)


# A member named gridDim or blockDim (cudaLaunchConfig_t's): `config.gridDim`, `config->blockDim`.
# The shim defines gridDim and blockDim as macros (a kernel's built-in variables), so a member
# of that name is renamed where it is used, and the shim's cudaLaunchConfig_t declares it so.
_CONFIG_DIM_RE = re.compile(r"(?:\.|->)\s*(gridDim|blockDim)\b")


def rewrite_for_emulator(text: str) -> str:
    """Rewrite what g++ cannot read into calls of the shim, keeping every line where it was."""
    code, _ = scanned(text)                  # the grade's scan of the same text, not another

    edits: list[tuple[int, int, str]] = []
    for m in re.finditer(r"^[ \t]*#[ \t]*include[ \t]*[<\"]([^>\"]+)[>\"]", code, re.M):
        header = text[m.start(1) : m.end(1)].strip()
        if header in _CUDA_HEADERS:
            edits.append((m.start(), m.end(), ""))
    for m in _LAUNCH_RE.finditer(code):
        kernel, config = text[m.start(1) : m.end(1)], text[m.start(2) : m.end(2)]
        # A kernel named with its template arguments is one function: its pointer is the launch's.
        # A name alone may be a template whose arguments the call deduces (GRADER_NAMED_LAUNCH).
        new = (f"::grader::launch({kernel}, {config.strip()})(" if "<" in kernel
               else f"GRADER_NAMED_LAUNCH({kernel}, {config.strip()})(")
        new += "\n" * (text[m.start() : m.end()].count("\n") - new.count("\n"))   # keep later lines in place
        edits.append((m.start(), m.end(), new))
    for m in _PACKED_LAUNCH_CAST_RE.finditer(code):
        edits.append((m.start(1), m.end(1), ""))
    for m in _CONFIG_DIM_RE.finditer(code):           # gridDim and blockDim are the shim's macros
        edits.append((m.start(1), m.end(1), f"grader_{m.group(1)}"))
    for m in _NOINLINE_RE.finditer(code):
        edits.append((m.start(), m.end(), "__attribute__((noinline))"))
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
