"""Screening a compiled submission before anything loads it.

The harness and the submission are compiled to an object file first; this
module reads that object's symbols (nm, readelf) and refuses what a
biasGeluFused submission has no business containing:

- host functions other than the kernels' stubs, nvcc's registration code,
  the optional launchBiasGeluFused and the grader's own entry points;
- static constructors (code that would run when the library is loaded);
- calls to host functions outside an allowlist: the CUDA launch machinery and
  the C++ runtime. Stream and event creation, allocation, copies, device
  synchronisation and attribute changes get a reason of their own; system(),
  fork(), file, socket, environment and dynamic-loading calls are all outside.

Nothing here runs the submission's code: it is read as an ELF file.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from grader.build import find_tool

HARNESS_FUNCTIONS = {"grader_submission_launch", "grader_error_string", "grader_launch_submission"}

# What nvcc's generated host code for kernels, launches and registration imports, and what the
# C++ runtime may pull in; the error queries are harmless.
ALLOWED_IMPORTS = {
    "__cudaGetKernel", "__cudaLaunchKernel", "__cudaLaunchKernel_ptsz", "__cudaPopCallConfiguration",
    "__cudaPushCallConfiguration", "__cudaRegisterFatBinary", "__cudaRegisterFatBinaryEnd", "__cudaRegisterFunction",
    "__cudaRegisterVar", "__cudaRegisterManagedVar", "__cudaUnregisterFatBinary", "__cudaInitModule",
    "cudaLaunchKernel", "cudaLaunchKernel_ptsz", "cudaGetLastError", "cudaPeekAtLastError", "cudaGetErrorString",
    "cudaGetErrorName", "_Unwind_Resume", "__cxa_guard_abort", "__cxa_guard_acquire", "__cxa_guard_release",
    "__gxx_personality_v0", "atexit", "__cxa_atexit", "__dso_handle", "__stack_chk_fail", "_GLOBAL_OFFSET_TABLE_",
    "memcpy", "memset", "memmove", "__cxa_begin_catch", "__cxa_end_catch", "_ZSt9terminatev",
    "__cudaRegisterLinkedBinary",
}
ALLOWED_IMPORT_PREFIXES = ("__cudaRegisterLinkedBinary_", "__nv_")

# Pure math a launcher (or, on the CPU emulator, a kernel) may call.
MATH = {
    f + s for f in ("sqrt", "cbrt", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "pow", "sin", "cos", "tan",
                    "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfc",
                    "tgamma", "lgamma", "ceil", "floor", "round", "lround", "llround", "trunc", "rint", "lrint",
                    "llrint", "nearbyint", "fmod", "remainder", "fma", "fmin", "fmax", "fabs", "hypot", "ldexp",
                    "frexp", "modf", "copysign", "nextafter", "scalbn", "ilogb", "logb", "sincos")
    for s in ("", "f")
}

LAUNCHER_RULES = [
    (re.compile(r"^cuda(Stream|Event)(Create|Destroy)"),
     "creates or destroys a stream or an event: launch on the stream you are given, which the grader times"),
    (re.compile(r"^cuda(Malloc|Free|HostAlloc|HostRegister|MallocManaged|MallocAsync|FreeAsync|MemPool)"),
     "allocates or frees memory: the grader owns every buffer; your launcher may only launch kernels"),
    (re.compile(r"^cuda(Memcpy|Memset|MemPrefetch|MemAdvise)"),
     "copies or sets memory: your launcher may only launch kernels"),
    (re.compile(r"^cuda(DeviceSynchronize|StreamSynchronize|EventSynchronize|StreamWaitEvent|StreamQuery|EventQuery|EventRecord|EventElapsedTime)"),
     "synchronises with or times the device: the grader does both; your launcher may only launch kernels"),
    (re.compile(r"^cuda(FuncSet|DeviceSet|StreamSetAttribute|CtxResetPersistingL2Cache|DeviceReset|SetDevice|ThreadSet|GraphicsMap)"),
     "changes device, function or stream attributes (cache configuration, L2 persistence, limits): not allowed"),
    (re.compile(r"^cuda(Graph|StreamBeginCapture|StreamEndCapture|LaunchHostFunc|StreamAddCallback)"),
     "captures graphs or adds host callbacks: your launcher may only launch kernels"),
]
DANGEROUS = re.compile(
    r"^(system|popen|pclose|fork|vfork|clone|exec\w*|posix_spawn\w*|fopen\w*|freopen|open\w*|creat|unlink\w*|remove|"
    r"rename\w*|mkdir|rmdir|socket|connect|bind|listen|accept\w*|send\w*|recv\w*|dlopen|dlsym|dlmopen|mmap\w*|"
    r"mprotect|munmap|ptrace|getenv|secure_getenv|setenv|putenv|unsetenv|kill|raise|signal|sigaction|write|read|"
    r"pwrite\w*|pread\w*|ioctl|syscall|chdir|chmod|chown|truncate|ftruncate|prctl|setuid|setgid)$")


@dataclass(frozen=True)
class Refusal:
    symbol: str
    reason: str

    def __str__(self) -> str:
        return f"{self.symbol}: {self.reason}"


def _symbols(obj: Path, *, undefined: bool) -> list[tuple[str, str, str]]:
    """(mangled, demangled, type) of the object's defined (or undefined) symbols."""
    args = [find_tool("nm"), "-P", "--undefined-only" if undefined else "--defined-only", str(obj)]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    rows = [line.split() for line in out.splitlines() if line.strip()]
    mangled = [(r[0], r[1]) for r in rows if len(r) >= 2]
    if not mangled:
        return []
    filt = shutil.which("c++filt")
    names = [m for m, _ in mangled]
    if filt:
        demangled = subprocess.run([filt], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    else:
        demangled = names
    return [(m, d, t) for (m, t), d in zip(mangled, demangled)]


def _init_array_entries(obj: Path) -> int:
    out = subprocess.run([find_tool("readelf"), "-rW", str(obj)], capture_output=True, text=True, check=True).stdout
    count, inside = 0, False
    for line in out.splitlines():
        if line.startswith("Relocation section"):
            inside = "'.rela.init_array'" in line or "'.rela.ctors'" in line or "'.rela.preinit_array'" in line
            continue
        if inside and re.match(r"^[0-9a-f]{8,}\s", line):
            count += 1
    return count


def _base(demangled: str) -> str:
    """The function's qualified name without parameters, template arguments or clone suffixes."""
    name = demangled.split(" [clone", 1)[0]
    name = name.split("(", 1)[0]
    if " " in name:                       # a return type printed before a template instance
        name = name.rsplit(" ", 1)[-1]
    return re.sub(r"<.*>$", "", name)


def screen_object(obj: Path, *, kernels: list[str], launcher: str, toolchain: str,
                  baseline: Path | None = None) -> list[Refusal]:
    """Refusals for the compiled harness object; an empty list means it may be loaded.

    toolchain 'nvcc' checks everything. 'g++' (the CPU emulator's object, used only where
    nvcc is missing) compiles kernels as host functions and links the shim, so there the
    imports and static constructors are checked against a baseline object of the shim alone.
    """
    refusals: list[Refusal] = []
    defined = _symbols(obj, undefined=False)
    imports = _symbols(obj, undefined=True)
    if toolchain == "g++":
        assert baseline is not None
        base_imports = {m for m, _, _ in _symbols(baseline, undefined=True)}
        imports = [s for s in imports if s[0] not in base_imports]
        base_inits = _init_array_entries(baseline)
    else:
        base_inits = 1                     # nvcc's own __sti____cudaRegisterAll

    for mangled, name, kind in defined:
        # (g++ objects carry the shim's own initialiser; there the .init_array count below decides)
        if toolchain == "nvcc" and mangled.startswith(("_GLOBAL__sub_I_", "_GLOBAL__I_")):
            refusals.append(Refusal("static constructor", "the file has a file-scope object whose initialiser runs when "
                                    "the library loads (e.g. `static int x = f();`, or #include <iostream>); "
                                    "initialise nothing at file scope"))
            continue
        if toolchain != "nvcc" or kind not in "TtWwi":
            continue
        base = _base(name)
        allowed = (
            base in kernels or base.startswith("__device_stub__") or base == launcher or base in HARNESS_FUNCTIONS
            or base.startswith(("__sti____cudaRegisterAll", "__cudaUnregisterBinaryUtil", "__nv_", "____nv_"))
            or (kind in "Ww" and base.startswith(("std::", "__gnu_cxx::", "cuda", "dim3::", "make_", "__cuda")))
        )
        if not allowed:
            refusals.append(Refusal(base, f"defines the host function {name}: a submission may define kernels, "
                                    f"__device__ functions and {launcher} only; move the work into a kernel"))

    inits = _init_array_entries(obj)
    if inits > base_inits and not any(r.symbol == "static constructor" for r in refusals):
        refusals.append(Refusal("static constructor", f"{inits - base_inits} function(s) run when the library loads "
                                "(__attribute__((constructor)) or a file-scope initialiser): not allowed"))

    for mangled, name, _ in imports:
        plain = _base(name)
        if mangled in ALLOWED_IMPORTS or plain in ALLOWED_IMPORTS or mangled.startswith(ALLOWED_IMPORT_PREFIXES):
            continue
        if plain in MATH or mangled in MATH:
            continue
        if toolchain == "g++" and (plain.startswith(("std::", "__cxa_", "operator")) or mangled.startswith("_Z")):
            continue                       # C++ runtime pieces the shim's templates pull in
        rule = next((reason for pattern, reason in LAUNCHER_RULES if pattern.match(plain)), None)
        if rule:
            refusals.append(Refusal(f"{plain}()", rule))
        elif DANGEROUS.match(plain):
            refusals.append(Refusal(f"{plain}()", "a submission may not run programs, touch files, sockets or the "
                                    "environment, or load code; host code may only launch kernels"))
        else:
            refusals.append(Refusal(f"{plain}()", "is outside the functions a submission may call (the CUDA launch "
                                    "machinery and math); host code may only launch kernels"))
    return refusals


def refusal_message(file_name: str, refusals: list[Refusal]) -> str:
    lines = [f"{file_name} was refused before it ran: it contains what a submission may not."]
    lines += [f"  - {r}" for r in refusals[:8]]
    if len(refusals) > 8:
        lines.append(f"  ... and {len(refusals) - 8} more")
    return "\n".join(lines)
