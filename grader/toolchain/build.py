"""Building a submission (and the reference kernels) into a shared library.

The translation unit and a build.ninja are generated from templates into a
cache directory named by a hash of everything that decides the output:
the source, the generated harness, the compiler and its version, the flags
and the target. A second build of the same inputs is a cache hit and runs
no compiler. nvcc builds for the GPU; g++ with the shim header builds the
same source for the CPU emulator.
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import functools
import hashlib
import json
import os
import shutil
import re
import struct
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from grader import __version__
from grader.core import sealed
from grader.core.errors import InfrastructureError
from grader.toolchain import tools
from grader.core.backend import Backend, Toolchain
from grader.core.locations import PACKAGE_DIR, cache_root, reference_dir
from grader.toolchain.outcome import (BuildResult, CompilerMessage, KernelResources, parse_alone, parse_gmem,
                                      parse_messages, parse_ptxas)
from grader.toolchain.render import render, template_digest
from grader.toolchain.running import BuildLimits, Ran, Room, build_room, run_limited, scratch_folder
from grader.exercises.rubric import Rubric
from grader.core.source import Submission, uses_device_lambdas
from grader.core.emulation import rewrite_for_emulator, spreads_over_cores, uses_collectives

REFERENCE_SOURCE = reference_dir() / "kernels.cu"
SHIM_HEADER = PACKAGE_DIR / "shim" / "cuda_shim.h"
LAUNCH_LOG_HEADER = PACKAGE_DIR / "shim" / "launch_log.h"    # the harness's and the shim's launch log
RUNTIME_SOURCE = PACKAGE_DIR / "run" / "child" / "runtime.cu"
GUARD_SOURCE = PACKAGE_DIR / "run" / "child" / "guard.c"


# The runtime's launch entry points and kernel attribute setters, wrapped at link time so that the
# harness's recorder sees every launch of the submission's kernels (<<<>>> compiles to
# __cudaLaunchKernel) and runs none (grader/run/child/replay.py).
# The stream-ordered work beside the launches (memsets, copies, copies to symbols, the workspace's
# allocations) is wrapped the same way, and __cudaRegisterVar so the recorder knows each
# __device__ variable's device name.
_WRAPPED = ("__cudaLaunchKernel", "__cudaLaunchKernel_ptsz", "cudaLaunchKernel", "cudaLaunchKernel_ptsz",
            "cudaLaunchCooperativeKernel", "cudaLaunchCooperativeKernel_ptsz", "cudaLaunchKernelExC",
            "cudaLaunchKernelExC_ptsz", "cudaFuncSetAttribute",
            "cudaFuncSetCacheConfig", "cudaMemset", "cudaMemset_ptds", "cudaMemsetAsync", "cudaMemsetAsync_ptsz",
            "cudaMemcpy", "cudaMemcpy_ptds", "cudaMemcpyAsync", "cudaMemcpyAsync_ptsz", "cudaMemcpyToSymbol",
            "cudaMemcpyToSymbol_ptds", "cudaMemcpyToSymbolAsync", "cudaMemcpyToSymbolAsync_ptsz", "cudaMalloc",
            "cudaMallocAsync", "cudaMallocAsync_ptsz", "cudaFree", "cudaFreeAsync", "cudaFreeAsync_ptsz",
            "__cudaRegisterVar",
            # answered without a GPU by the recorder that runs ahead of the lane (recorder.cpp.j2's g_offline),
            # passed on to the runtime by the one that records on the GPU
            "__cudaRegisterFunction", "__cudaGetKernel", "cudaGetKernel", "__cudaPushCallConfiguration",
            "__cudaPopCallConfiguration", "cudaGetLastError", "cudaPeekAtLastError", "cudaDeviceSynchronize",
            "cudaStreamSynchronize", "cudaStreamSynchronize_ptsz", "cudaStreamQuery", "cudaStreamQuery_ptsz",
            "cudaGetDevice", "cudaSetDevice", "cudaGetDeviceCount", "dlopen")
RECORDER_LINK_FLAGS = tuple(f for name in _WRAPPED for f in ("-Xlinker", f"--wrap={name}"))


def _digest(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else p.encode())
        h.update(b"\0")
    return h.hexdigest()[:24]


def build_submission(sub: Submission, rubric: Rubric, *, backend: Backend, arch: str = "sm_90") -> BuildResult:
    """Build the submission with the backend's toolchain (nvcc for arch, or g++ against the shim),
    within the rubric's build limits."""
    tc = backend.toolchain
    context = dict(version=__version__, backend=backend.name, on_gpu=not tc.shim, records=backend.records_then_replays,
                   launcher=rubric.kernel.parsed_launcher if sub.has_launcher else None, kernel=rubric.kernel.parsed,
                   workspace_bytes=rubric.limits.workspace_mib << 20)
    # Keyed on the template and its context (their reprs are their fields'), rendered only to build.
    harness = (template_digest("harness.cu.j2"), repr(sorted(context.items())))
    source = rewrite_for_emulator(sub.compiled) if tc.shim else sub.compiled
    lambdas = tc.lambda_flags if uses_device_lambdas(sub.code) else ()
    flags = compile_flags(tc, tc.flags + lambdas, arch=arch, fibers=uses_collectives(sub), spread=spreads_over_cores(sub))
    shim = shim_text() if tc.shim else ""
    # the recorder sees the launcher's launches and stream work through the wrapped entry points
    link_flags = RECORDER_LINK_FLAGS if backend.records_then_replays else ()
    key = _digest(__version__, backend.name, source, *harness, " ".join(flags), " ".join(link_flags),
                  tools.version(tc.compiler), backend.target(arch), shim)
    linked = recorder_object(backend, workspace_bytes=context["workspace_bytes"]) if context["records"] else None
    key = _digest(key, linked.key if linked else "")
    return _build(Plan(
        key=f"sub-{key}",
        link_flags=link_flags,
        files={"submission.cu": source, "harness.cu": lambda: render("harness.cu.j2", **context)},
        main="harness.cu",
        flags=flags,
        linked=linked,
        user_path=str(sub.path),
        limits=BuildLimits(rubric.limits.build_time_s, rubric.limits.build_memory_mib,
                           require_wall=rubric.limits.require_read_wall),
    ), backend)


@dataclass(frozen=True)
class LinkedObject:
    """An object the grader builds once per machine and links into every library of a backend (the
    recorder): its cache key, where it lies once made, and how it is made (or found made)."""

    key: str
    path: Path
    make: Callable[[], None]


def recorder_object(backend: Backend, *, workspace_bytes: int) -> LinkedObject:
    """The recorder (recorder.cpp.j2) as an object of its own: host code only, the same for every
    submission of an exercise, so it is compiled once per machine, not in each submission's build
    (its host compile was about 0.7 s of every nvcc build of the harness, on 2 cores)."""
    tc = backend.toolchain
    context = dict(version=__version__, workspace_bytes=workspace_bytes)
    flags = list(tc.host_flags)
    key = _digest(__version__, template_digest("recorder.cpp.j2"), repr(sorted(context.items())), " ".join(flags),
                  tools.version(tc.compiler))
    directory = cache_root() / f"rec-{key}"
    obj = directory / "recorder.o"

    def make() -> None:
        directory.mkdir(parents=True, exist_ok=True)
        with open(directory / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)      # builds of one batch wait for the one compile
            if obj.exists():
                problem = sealed.check(obj, full=True)
                if not problem:
                    _touch(directory)
                    return
                if "no valid seal" not in problem:
                    sealed.say_healed(f"the recorder {directory.name}", problem)
                sealed.unlink_with_seal(obj)
            text = render("recorder.cpp.j2", **context)
            (directory / "recorder.cpp").write_text(text)          # kept beside its object, to read
            check_scratch_folder()
            with build_room() as room:
                (room.path / "recorder.cpp").write_text(text)
                args = [tools.require(tc.compiler), *flags, "-c", "-o", "recorder.o", "recorder.cpp"]
                ran = run_limited(args, BuildLimits(), room)
                log = ran.proc.stdout + ran.proc.stderr
                made = room.path / "recorder.o"
                if ran.proc.returncode != 0 or ran.over or not made.exists():
                    fault = machine_fault(log) or disk_fault(log, room.path) or ran.over
                    raise InfrastructureError(f"the grader's recorder ({directory / 'recorder.cpp'}) did not build"
                                              f"{': ' + fault if fault else ''}: check the compiler runs "
                                              f"(`{Path(args[0]).name} --version`) and the free space of TMPDIR and "
                                              f"GRADER_CACHE_DIR\n{' '.join(args)}\n{log[-1500:]}")
                _keep(made, obj)
            sealed.seal(obj)

    return LinkedObject(key=key, path=obj, make=make)


def compile_flags(tc: Toolchain, flags: tuple[str, ...], *, arch: str, fibers: bool = False,
                  spread: bool = False) -> list[str]:
    """A toolchain's flags with the architecture and the shim header filled in; against the shim,
    what the file's barriers or a large launch need (emulator_flags)."""
    if tc.shim:
        return emulator_flags(flags, fibers=fibers, spread=spread)
    return [f.format(arch=arch, shim=SHIM_HEADER) for f in flags]


FATBIN_MAGIC = 0xBA55ED50


def device_variables(obj: Path) -> list[str]:
    """The device names of the submission's __device__ and __constant__ variables (the OBJECT
    symbols of its device code, read with cuobjdump -elf from the parent's own build output): the
    measuring process restores each to its last host-written value before every call, so nothing a
    kernel leaves in static memory reaches the next call. [] where cuobjdump is missing."""
    return _device_symbols(obj)["variables"]


def uses_device_heap(obj: Path) -> bool:
    """Whether the submission's device code calls malloc (an extern FUNC symbol in its ELF): the
    measuring process then poisons the device heap's free memory before every call and counts what
    a call kept, as it does for the workspace. False where cuobjdump is missing."""
    return _device_symbols(obj)["heap"]


def _device_symbols(obj: Path) -> dict:
    from grader.core.objmemo import read_beside

    tool = tools.locate("cuobjdump")
    if tool is None:
        return {"variables": [], "heap": False}

    def read() -> dict:
        done = subprocess.run([tool, "-elf", str(obj)], capture_output=True, text=True)
        symbols = elf_symbols(done.stdout)
        names = [name for name, kind in symbols if kind == "OBJECT" and not name.startswith(".")]
        heap = any(kind == "FUNC" and name in ("malloc", "__nv_aligned_device_malloc") for name, kind in symbols)
        return {"variables": list(dict.fromkeys(names)), "heap": heap}

    return read_beside(obj, "device_symbols", read)


_SYMBOL_TYPES = {1: "OBJECT", 2: "FUNC"}        # an ELF symbol's info byte, its low four bits (STT_*)


def elf_symbols(listing: str) -> list[tuple[str, str]]:
    """(name, OBJECT or FUNC) of each row of the symbol tables in `cuobjdump -elf`'s listing. Its
    releases print a row two ways: with the type named (13.5: `0x15 0 0 FUNC GLOBAL DEFAULT - 0
    malloc`), or as numbers (13.0: `0x15 0 0 0x12 0 0 malloc`, the type in the info byte's low bits)."""
    out = []
    for line in listing.splitlines():
        cols = line.split()
        if len(cols) < 7 or not cols[0].startswith("0x"):
            continue
        named = next((c for c in cols[3:5] if c in ("OBJECT", "FUNC")), None)
        if named:
            out.append((cols[-1], named))
        elif len(cols) == 7 and all(_is_number(c) for c in cols[:6]):
            kind = _SYMBOL_TYPES.get(int(cols[3], 16) & 0xF)
            if kind:
                out.append((cols[-1], kind))
    return out


def _is_number(text: str) -> bool:
    try:
        int(text, 16)
        return True
    except ValueError:
        return False


def device_code(library: Path) -> list[Path]:
    """The fatbinaries in a built library's .nv_fatbin section, each written to a file beside it
    (once): what the measuring process loads with the driver instead of the library itself.

    Read here, in the parent, from the build's own output, before any process that runs the
    submission's host code has seen the library. It holds one (a library linked with nvcc's device
    link step holds two: an empty one, then the submission's); every one is kept, and the measuring
    process looks kernels up in all of them."""
    kept = sorted(library.parent.glob("device-*.fatbin"))
    if kept and not any(sealed.check(p, full=True) for p in kept):
        return kept
    data = library.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise InfrastructureError(f"{library} is not a 64-bit ELF library: its device code cannot be read")
    blob = next((body for name, body in _elf_sections(data) if name == b".nv_fatbin"), b"")
    pieces, at = [], 0
    while at + 16 <= len(blob):
        magic, _version, header, size = struct.unpack_from("<IHHQ", blob, at)
        if magic != FATBIN_MAGIC:
            at += 8                                   # padding between two fatbinaries
            continue
        pieces.append(blob[at: at + header + size])
        at += header + size
    if not pieces:
        raise InfrastructureError(f"{library} holds no device code (.nv_fatbin): was it built by nvcc?")
    paths = []
    for i, piece in enumerate(pieces):
        path = library.parent / f"device-{i}.fatbin"
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_bytes(piece)
        os.replace(tmp, path)
        sealed.seal(path, hashlib.sha256(piece).hexdigest())
        paths.append(path)
    return paths


_ELF_ENTRY = 2                   # a fatbinary entry holding a cubin (1: PTX)
_EIATTR_KPARAM_INFO, _EIATTR_PARAM_CBANK = 0x17, 0x0A     # a cubin's .nv.info.<kernel> attributes
_EIFMT_NVAL, _EIFMT_BVAL, _EIFMT_HVAL, _EIFMT_SVAL = 1, 2, 3, 4


def _elf_sections(data: bytes) -> list[tuple[bytes, bytes]]:
    """(name, bytes) of each section of a 64-bit little-endian ELF image."""
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    entsize, count, names_at = struct.unpack_from("<HHH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * entsize) for i in range(count)]
    names_offset = sections[names_at][4]
    out = []
    for s in sections:
        start = names_offset + s[0]
        out.append((data[start: data.index(b"\0", start)], data[s[4]: s[4] + s[5]]))
    return out


def _nv_info_layout(blob: bytes) -> list[list[int]] | None:
    """A kernel's parameters as [offset, size] in their order, from its .nv.info section's
    KPARAM_INFO records; None where they do not add up to its parameter bank's size."""
    params: dict[int, list[int]] = {}
    bank = None
    at = 0
    while at + 2 <= len(blob):
        fmt, attr = blob[at], blob[at + 1]
        at += 2
        if fmt == _EIFMT_SVAL:
            size = struct.unpack_from("<H", blob, at)[0]
            value = blob[at + 2: at + 2 + size]
            at += 2 + size
            if attr == _EIATTR_KPARAM_INFO and len(value) >= 12:
                _index, ordinal, offset, flags = struct.unpack_from("<IHHI", value)
                params[ordinal] = [offset, (flags >> 18) & 0x3FFF]
            elif attr == _EIATTR_PARAM_CBANK and len(value) >= 8:
                bank = struct.unpack_from("<IHH", value)[2]
        elif fmt in (_EIFMT_NVAL, _EIFMT_BVAL, _EIFMT_HVAL):
            at += 2                                 # a record of four bytes in all (a byte, a half-word or nothing)
        else:
            return None                             # a record this reader does not know: nothing trusted
    layout = [params[i] for i in sorted(params)]
    if sorted(params) != list(range(len(params))):
        return None
    total = max((o + n for o, n in layout), default=0)
    return layout if total == (bank or 0) else None


def kernel_parameters(fatbins: list[Path]) -> dict[str, list[list[int]]]:
    """Each kernel's parameters, [offset, size] in order, by its device name, read from the cubins
    in the build's fatbinaries (device_code): what the recorder without a GPU copies a launch's
    parameters by (the driver's cuKernelGetParamInfo gives the one on the GPU). A kernel whose
    records do not add up, or that two cubins lay out differently, or in a compressed cubin, is
    left out: its launch is recorded on the GPU instead."""
    found: dict[str, list[list[int]] | None] = {}
    for path in fatbins:
        blob = path.read_bytes()
        magic, _version, header, size = struct.unpack_from("<IHHQ", blob, 0)
        at = header
        while magic == FATBIN_MAGIC and at + 16 <= min(len(blob), header + size):
            kind, _v, entry_header, payload = struct.unpack_from("<HHII", blob, at)
            cubin = blob[at + entry_header: at + entry_header + payload]
            at += entry_header + payload
            if kind != _ELF_ENTRY or cubin[:4] != b"\x7fELF" or len(cubin) < 64 or cubin[4] != 2:
                continue
            try:
                sections = _elf_sections(cubin)
            except (struct.error, ValueError, IndexError):
                continue
            for name, data in sections:
                if name.startswith(b".nv.info.") and len(name) > 9:
                    kernel = name[9:].decode(errors="replace")
                    layout = _nv_info_layout(data)
                    if kernel in found and found[kernel] != layout:
                        layout = None
                    found[kernel] = layout
    return {k: v for k, v in found.items() if v is not None}


def baseline_source(rubric: Rubric) -> str:
    """A trivial kernel of the exercise's signature: it copies its first input to its first output."""
    sig = rubric.kernel.parsed
    src = next((p.name for p in sig.params if p.pointer and p.const_data), None)
    dst = next((p.name for p in sig.params if p.pointer and not p.const_data), None)
    body = (f"    const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;\n"
            f"    if (i < 1) {dst}[i] = {src}[i];\n") if src and dst else ""
    params = ", ".join(f"{p.ctype} {p.name}" for p in sig.params)
    return f"__global__ void {sig.name}({params}) {{\n{body}}}\n"


def build_baseline(rubric: Rubric, *, backend: Backend, fibers: bool) -> BuildResult:
    """The harness around a trivial kernel, built as backend builds (against the shim): what the
    shim alone puts in an object, for screening a g++-built submission where nvcc is missing."""
    from grader.core.source import Submission, blank_comments_and_strings, find_kernels

    text = baseline_source(rubric) + ("__global__ void grader_baseline_sync() { __syncthreads(); }\n" if fibers else "")
    code = blank_comments_and_strings(text)
    sub = Submission(path=Path("baseline.cu"), text=text, sha256="", code=code, kernels=find_kernels(code))
    result = build_submission(sub, rubric, backend=backend)
    if not result.ok:
        raise InfrastructureError(f"the emulator's baseline did not build:\n{result.log}")
    return result


def build_reference(*, backend: Backend, arch: str = "sm_90", exercise_kernels: str = "") -> BuildResult:
    """Build the grader's reference kernels (reference/kernels.cu: the copies) with an exercise's
    own (reference/<exercise>/kernels.cu), once per backend, architecture and exercise."""
    tc = backend.toolchain
    files = {"kernels.cu": REFERENCE_SOURCE.read_text()}
    if exercise_kernels.strip():
        files["exercise.cu"] = exercise_kernels
    if tc.runtime:
        # the child's runtime helpers (allocation, copies, events): how it drives the GPU without torch
        files["runtime.cu"] = RUNTIME_SOURCE.read_text()
    if tc.shim:
        # the shim defines its entry points in its header: one translation unit
        files = {k: rewrite_for_emulator(v) for k, v in files.items()}
        files["reference.cu"] = "".join(f'#include "{name}"\n' for name in files)
        main, also = "reference.cu", ()
    else:
        # each file compiled on its own and at once (ninja runs them side by side), then linked into
        # one library: on a fresh machine this build, not the student's, was a first grade's longest
        main, also = "kernels.cu", tuple(name for name in files if name != "kernels.cu")
    flags = compile_flags(tc, tc.reference_flags, arch=arch)
    extra = shim_text() if tc.shim else ""
    key = _digest(__version__, backend.name, *files.values(), " ".join(flags), tools.version(tc.compiler),
                  backend.target(arch), extra)
    result = _build(Plan(key=f"ref-{key}", files=files, main=main, flags=flags, user_path=str(REFERENCE_SOURCE),
                         also=also), backend)
    if not result.ok:
        raise InfrastructureError(f"the reference kernels did not build ({result.command}):\n{result.log}")
    return result


def shim_text() -> str:
    """What every emulator build compiles besides its own files: the shim and what it includes."""
    return SHIM_HEADER.read_text() + LAUNCH_LOG_HEADER.read_text()


def emulator_flags(base: tuple[str, ...], *, fibers: bool, spread: bool = False) -> list[str]:
    """g++ flags that compile CUDA source against the shim (base: the toolchain's, core/backend.py,
    which says why each is there; fibers: the file uses barriers or warp collectives; spread: a
    large launch may run on several OS threads, source.spreads_over_cores).

    TLS descriptors (-mtls-dialect=gnu2) where spread: the thread indices are then thread_local,
    and a descriptor reads one in a few instructions where __tls_get_addr costs a call (about
    0.1 s more a one-core run of the timed shape, measured).
    """
    flags = [f.format(arch="", shim=SHIM_HEADER) for f in base]
    if fibers:
        flags.insert(0, "-DGRADER_EMU_FIBERS")
    elif spread:
        flags[:0] = ["-DGRADER_EMU_PARALLEL", "-pthread"]
        if os.uname().machine == "x86_64":          # aarch64 uses descriptors already
            flags.insert(1, "-mtls-dialect=gnu2")
    return flags


def build_guard() -> Path | None:
    """The child's seccomp filter (grader/run/child/guard.c) as a shared library, built once per host
    with the C compiler; None where there is no C compiler or the host is not Linux."""
    return _c_library("guard", GUARD_SOURCE.read_text(), "guard.c", "libgrader_guard.so", "sandbox filter library")


# What the recorder without a GPU finds where a launcher looks for the CUDA driver (dlopen of
# libcuda.so.1, RTLD_NOLOAD or not): a library of that name whose every entry point ends the
# recorder saying which, so that a launcher that drives the GPU itself is recorded on the GPU, as before.
_STAND_IN_DRIVER = """// Generated by grader {version} from the CUDA headers' driver API; do not edit.
#include <stdio.h>
#include <unistd.h>
static void grader_stop(const char* name) {{
    char line[200];
    int n = snprintf(line, sizeof line, "grader: the launcher called the driver's %s, which the recorder "
                     "answers only on the GPU\\n", name);
    if (n > 0) {{ ssize_t ignored = write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1); (void)ignored; }}
    _exit(96);                      /* recorder.py's NEEDS_GPU_EXIT */
}}
#define STOP(name) int name(void) {{ grader_stop(#name); return 999; }}
{stubs}
"""


def driver_entry_points(headers: list[str]) -> list[str]:
    """The CUDA driver's function names in its headers' text: each declared cu* function, both
    names of each versioned #define, and the per-thread-stream forms (_ptds, _ptsz)."""
    names: set[str] = set()
    for text in headers:
        names.update(re.findall(r"\b(cu[A-Z][A-Za-z0-9_]*)\s*\(", text))
        for alias, target in re.findall(r"#\s*define\s+(cu[A-Z]\w*)\s+(cu[A-Z]\w*)\b", text):
            names.update((alias, target))
        for kind, name in re.findall(r"__CUDA_API_PT(DS|SZ)\((cu[A-Z]\w*)\)", text):
            names.update((name, f"{name}_pt{kind.lower()}"))
    return sorted(names)


def build_driver_stand_in() -> Path | None:
    """libcuda.so.1 for the recorder without a GPU (run/child/recorder.py), built once per host and
    toolkit from the driver API in the toolkit's cuda.h; None without nvcc's headers or a C compiler."""
    nvcc = tools.locate("nvcc")
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"),
             str(Path(nvcc).resolve().parent.parent) if nvcc else None, "/usr/local/cuda"]
    include = next((Path(h) / "include" for h in homes if h and (Path(h) / "include" / "cuda.h").is_file()), None)
    if include is None:
        return None
    text = _stand_in_driver_source(str(include), (include / "cuda.h").stat().st_mtime_ns)
    return _c_library("nodriver", text, "nodriver.c", "libcuda.so.1", "stand-in driver library", soname="libcuda.so.1")


@functools.lru_cache(maxsize=4)
def _stand_in_driver_source(include: str, _mtime_ns: int) -> str:
    """The stand-in driver's C source from the headers in include (read once a process: 0.09 s a grade)."""
    texts = [(Path(include) / "cuda.h").read_text(errors="replace")]
    profiler = Path(include) / "cudaProfiler.h"
    if profiler.is_file():
        texts.append(profiler.read_text(errors="replace"))
    stubs = "\n".join(f"STOP({name})" for name in driver_entry_points(texts))
    return _STAND_IN_DRIVER.format(version=__version__, stubs=stubs)


def _c_library(kind: str, text: str, source: str, name: str, what: str, soname: str = "") -> Path | None:
    """text built with the host C compiler into a shared library in the cache, once per text,
    compiler and machine (sealed, and rebuilt where its seal fails); None without a C compiler."""
    cc = tools.locate("cc") or tools.locate("gcc")
    if cc is None or not os.path.exists("/proc/self/status"):
        return None
    version = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout.split("\n", 1)[0]
    directory = cache_root() / f"{kind}-{_digest(__version__, text, version, os.uname().machine)}"
    library = directory / name
    if library.exists() and not sealed.check(library, full=True):
        _touch(directory)
        return library
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        problem = sealed.check(library, full=True) if library.exists() else "missing"
        if problem and problem != "missing":
            sealed.say_healed(what, problem)
        if problem:
            (directory / source).write_text(text)
            tmp = directory / f"{name}.tmp"
            extra = [f"-Wl,-soname,{soname}"] if soname else []
            proc = subprocess.run([cc, "-O2", "-shared", "-fPIC", *extra, "-o", str(tmp), str(directory / source)],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                raise InfrastructureError(f"the grader's {what} did not build with {cc}:\n{proc.stderr[-2000:]}")
            tmp.rename(library)
            sealed.seal(library)
    return library


def ninja_text_of(text: str) -> str:
    """text as a value in a ninja file: `$` is ninja's escape (`k$(b).cu` broke the build file, and a
    correct kernel became a compile_error), and a line break would end the value."""
    return "".join("$$" if c == "$" else (" " if c in "\r\n" else c) for c in text)


def _touch(directory: Path) -> None:
    """Mark a cache entry used (least-recently-used pruning reads this time)."""
    try:
        os.utime(directory, None)
    except OSError:
        pass


@dataclass(frozen=True)
class Plan:
    """One build: its cache key, its files (a callable: a text made only when it is built), the file
    compiled into main.o (the others it includes) and those compiled on their own beside it (also),
    the flags, what the link adds (flags; an object built once, LinkedObject), the file named in the
    student's messages and the limits the compiler runs under."""

    key: str
    files: dict[str, str | Callable[[], str]]
    main: str
    flags: list[str]
    user_path: str
    also: tuple[str, ...] = ()
    link_flags: tuple[str, ...] = ()
    linked: LinkedObject | None = None
    limits: BuildLimits = BuildLimits()


def _build(plan: Plan, backend: Backend) -> BuildResult:
    """plan built in a room of its own behind the build's wall (toolchain/running.py), its library
    and object kept in the cache, or found there; the compilers never see the cache."""
    root = cache_root()
    directory = root / plan.key
    directory.mkdir(parents=True, exist_ok=True)
    library = directory / "lib.so"
    obj = directory / "main.o"
    meta = directory / "build.json"
    tc = backend.toolchain
    files, flags, limits, user_path = plan.files, plan.flags, plan.limits, plan.user_path
    compiler = tools.require(tc.compiler)
    command = " ".join([compiler, *flags, "-c", "-o", "main.o", plan.main])
    # -nodlink: whole-program device code (no -rdc) needs no device link; nvcc's would only add an
    # empty fatbinary, and took 0.3 s of a 1 s build.
    compiles = [(plan.main, "main.o"), *((name, f"{Path(name).stem}.o") for name in plan.also)]
    objects = [obj for _, obj in compiles] + ([LINKED_NAME] if plan.linked else [])
    link = " ".join([compiler, "-shared", *tc.library_flags, *plan.link_flags])
    start = time.perf_counter()
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)        # two graders building the same file wait for each other
        if library.exists() and meta.exists():
            cached = _cached_build(directory, library, obj, meta)
            if cached is not None:
                _touch(directory)
                return BuildResult(ok=True, library=library, object=obj, cached=True,
                                   seconds=time.perf_counter() - start, command=command, log=cached["log"],
                                   resources=[KernelResources(**r) for r in cached["resources"]],
                                   compiler=cached["compiler"], static_device_bytes=parse_gmem(cached["log"]),
                                   confined=cached.get("confined", False), wall=cached.get("wall", ""))
        check_scratch_folder()
        with build_room(read=(str(SHIM_HEADER.parent),) if tc.shim else ()) as room:
            made = {name: text() if callable(text) else text for name, text in files.items()}  # made only to build
            made["build.ninja"] = render("build.ninja.j2", version=__version__, compile=" ".join([compiler, *flags]),
                                         link=link, description=ninja_text_of(f"{backend.name} build of "
                                                                              f"{Path(user_path).name}"),
                                         compiles=compiles, objects=objects,
                                         included=[name for name in files if name != plan.main and name not in plan.also])
            for name, text in made.items():         # in the room, and beside its outputs in the cache, to read
                _write_text(room.path / name, text)
                _write_text(directory / name, text)
            ran = _compile_and_link(room, plan.linked, limits)
            proc, over = ran.proc, ran.over
            wall = dict(confined=ran.confined, wall=ran.wall, wall_ms=ran.wall_ms)
            log = _strip_ninja(proc.stdout + proc.stderr)
            if proc.returncode != 0 and not over:
                fault = machine_fault(log) or disk_fault(log, room.path) or \
                    known_good_fault(compiler, flags, [*tc.library_flags, *plan.link_flags], limits)
                if fault:
                    raise InfrastructureError(f"the build of {Path(user_path).name} failed for a reason of this "
                                              f"machine, not of the code: {fault}\n{log[-1500:]}")
            if over:
                messages = [CompilerMessage(file=user_path, line=None, severity="error", text=over, in_submission=True)]
                return BuildResult(ok=False, library=None, object=None, cached=False,
                                   seconds=time.perf_counter() - start, command=command, log=over + "\n" + log,
                                   messages=messages, compiler=tools.version(tc.compiler), over_limit=True, **wall)
            messages = parse_messages(log, room.path, user_path)
            resources = parse_ptxas(log) if tc.resources else []
            version = tools.version(tc.compiler)
            if proc.returncode != 0 or not (room.path / "lib.so").exists():
                alone = _alone(room, compiler, flags, backend, plan) if "submission.cu" in files else ""
                return BuildResult(ok=False, library=None, object=None, cached=False,
                                   seconds=time.perf_counter() - start, command=command, log=log, messages=messages,
                                   resources=resources, compiler=version, alone_log=alone,
                                   alone_messages=parse_alone(alone, user_path) if alone else [], **wall)
            _keep(room.path / "lib.so", library)
            _keep(room.path / "main.o", obj)
        sealed.seal(library)
        sealed.seal(obj)
        tmp_meta = meta.with_name(f"build.json.{os.getpid()}")
        tmp_meta.write_text(json.dumps({"log": log, "resources": [asdict(r) for r in resources], "compiler": version,
                                        "confined": wall["confined"], "wall": wall["wall"]}))
        os.replace(tmp_meta, meta)
        return BuildResult(ok=True, library=library, object=obj, cached=False, seconds=time.perf_counter() - start,
                           command=command, log=log, messages=messages, resources=resources, compiler=version,
                           static_device_bytes=parse_gmem(log) if tc.resources else 0, **wall)


def _write_text(path: Path, text: str) -> None:
    """A generated file of the build: the student's text as it was read (a name or a byte that is not
    UTF-8 kept as its surrogate escape, written back as the same byte)."""
    path.write_bytes(text.encode("utf-8", "surrogateescape"))


def _keep(made: Path, kept: Path) -> None:
    """A build's output copied from its room into the cache (whole, or not at all)."""
    tmp = kept.with_name(f"{kept.name}.{os.getpid()}.{threading.get_ident()}")
    try:
        shutil.copyfile(made, tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, kept)
    finally:
        tmp.unlink(missing_ok=True)


LINKED_NAME = "linked.o"      # the once-built object (LinkedObject), copied beside main.o for the link


def _compile_and_link(room: Room, linked: LinkedObject | None, limits: BuildLimits) -> Ran:
    """ninja in the room: the compile and the link; with an object built once (the recorder), that
    object is made (or found) while the submission compiles, and copied in for the link."""
    ninja = tools.require("ninja")
    if linked is None:
        return run_limited([ninja, "--quiet"], limits, room)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="linked-object") as pool:
        made = pool.submit(linked.make)
        compiled = run_limited([ninja, "--quiet", "main.o"], limits, room)
        if compiled.proc.returncode != 0 or compiled.over:
            return compiled
        made.result()                   # the grader's own object failed: InfrastructureError, the machine's
    shutil.copyfile(linked.path, room.path / LINKED_NAME)
    linked_run = run_limited([ninja, "--quiet"], limits, room)
    both = subprocess.CompletedProcess(linked_run.proc.args, linked_run.proc.returncode,
                                       compiled.proc.stdout + linked_run.proc.stdout,
                                       compiled.proc.stderr + linked_run.proc.stderr)
    return dataclasses.replace(linked_run, proc=both, wall_ms=round(compiled.wall_ms + linked_run.wall_ms, 3))


_SCRATCH_PROBE = 1 << 20       # nvcc's temporary files for one build: a few MiB; a folder without 1 MiB fails it


def check_scratch_folder() -> None:
    """InfrastructureError naming the folder and the fix where the compilers' temporary folder
    cannot take a file of _SCRATCH_PROBE bytes (missing, read-only, full, over quota): checked
    before a build, so that such a machine never reads as a student's compile error."""
    folder = scratch_folder()
    probe = folder / f".grader-probe-{os.getpid()}-{time.monotonic_ns()}"
    try:
        with open(probe, "wb") as f:
            f.write(b"\0" * _SCRATCH_PROBE)
    except OSError as exc:
        if exc.errno == errno.EFBIG:
            import resource

            limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
            raise InfrastructureError(
                f"the file-size limit this grader inherited (`ulimit -f`, now {limit // 1024} KiB) is smaller than the "
                "files a build and a grade write (the timed shape's inputs are 64 MiB): raise it (`ulimit -f "
                "unlimited`) and grade again. Nothing was compiled; no student is graded for this.") from None
        raise InfrastructureError(
            f"the compilers' temporary folder {folder} cannot take a 1 MiB file ({exc.strerror or exc}): "
            f"{'set TMPDIR to' if os.environ.get('TMPDIR') else 'free space in /tmp or set TMPDIR to'} a writable "
            "folder with free space, and grade again. Nothing was compiled; no student is graded for this.") from None
    finally:
        try:
            probe.unlink()
        except OSError:
            pass


# What a compiler prints when the machine, not the code, failed it: the temporary folder, the
# disk, the process and file limits. Matched on a failed build's log; the student is never blamed.
_MACHINE_FAULTS = (
    (r"Could not open output file '?([^'\s]*tmpxft[^'\s]*)", "nvcc could not write its temporary file {0}: set TMPDIR to "
     "a writable folder with free space"),
    (r"Failed to preprocess host compiler properties", "nvcc could not run the host compiler to read its properties "
     "(usually a full or read-only temporary folder, $TMPDIR or /tmp): set TMPDIR to a writable folder with free space"),
    (r"[Cc]annot create temporary file in ([^:]+): ([^\n]+)", "the compiler could not create a temporary file in {0} "
     "({1}): set TMPDIR to a writable folder with free space"),
    (r"No space left on device|Disk quota exceeded", "the disk is full (or over its quota) where the compiler writes: "
     "free space, or set TMPDIR and GRADER_CACHE_DIR to a disk with room"),
    (r"Read-only file system", "the compiler was asked to write on a read-only file system: set TMPDIR and "
     "GRADER_CACHE_DIR to writable folders"),
    (r"Too many open files", "the compiler ran out of file descriptors: raise the open-files limit (`ulimit -n`, "
     "now {nofile}) to at least 1024"),
    (r"Killed signal terminated program (\S+)|'(\S+)' died due to signal 9", "the compiler ({0}{1}) was killed from "
     "outside the build (the out-of-memory killer, a job's memory limit or an administrator): the machine ran short of "
     "memory; grade with fewer grades at once (`--jobs`) or give the job more memory"),
    (r"[Cc]ould not fork|[Cc]annot fork|Resource temporarily unavailable", "the compiler could not start its "
     "processes: raise the process limit (`ulimit -u`, now {nproc}) to at least a few hundred"),
)


def machine_fault(log: str) -> str | None:
    """What of a failed build's log says the machine failed it (see _MACHINE_FAULTS), said with the
    fix; None where the code failed it."""
    import re
    import resource

    def limit(which: int) -> str:
        soft, _ = resource.getrlimit(which)
        return "unlimited" if soft == resource.RLIM_INFINITY else str(soft)

    # Only the tools' own lines: a diagnostic about a source file (file(12): ..., file:12:5: ...) and
    # the source lines echoed under it can carry any text the student wrote (#error Too many ...).
    own = "\n".join(ln for ln in log.splitlines()
                    if ln and not ln[0].isspace() and not re.match(r"\S+(\(\d+\)|:\d+(:\d+)?):", ln))
    for pattern, text in _MACHINE_FAULTS:
        m = re.search(pattern, own)
        if m:
            return text.format(*(g or "" for g in m.groups()), nofile=limit(resource.RLIMIT_NOFILE), nproc=limit(resource.RLIMIT_NPROC))
    return None


_OUT_OF_DISK = r"No space left on device|Disk quota exceeded|Read-only file system"
DISK_FLOOR_MIB = 32          # less free than this where a build writes, after it failed: the disk failed it


def disk_fault(log: str, directory: Path) -> str | None:
    """A failed build that the disk failed, decided from the machine where its words are not the
    tools' own lines (machine_fault skips every diagnostic line, and nvcc says a full TMPDIR as one:
    `.../sm_32_intrinsics.h(403): catastrophic error: error while writing generated C++ file: No space
    left on device`): a catastrophic error of that kind in a file outside the build's folder (no
    student's file: their copy is inside it), or less than DISK_FLOOR_MIB free in TMPDIR or the
    build's folder now. None where the disk is fine."""
    import re
    import tempfile

    for m in re.finditer(rf"^(/[^\n(]+)\(\d+\): catastrophic error: [^\n]*({_OUT_OF_DISK})", log, re.M):
        if not Path(m.group(1)).is_relative_to(directory):
            return (f"the compiler could not write its files ({m.group(2)}): free space in "
                    f"{tempfile.gettempdir()} or point TMPDIR (and GRADER_CACHE_DIR) at a larger disk")
    for folder in (Path(tempfile.gettempdir()), directory):
        try:
            st = os.statvfs(folder)
        except OSError:
            continue
        free_mib = st.f_bavail * st.f_frsize / 2**20
        if free_mib < DISK_FLOOR_MIB:
            return (f"{folder} has {free_mib:.1f} MiB free (a build needs about {DISK_FLOOR_MIB} MiB for the "
                    "compiler's files): free space there, or point TMPDIR (and GRADER_CACHE_DIR) at a larger disk")
    return None


KNOWN_GOOD = "__global__ void grader_known_good(float* x) { x[threadIdx.x] = 1.0f; }\n"
_KNOWN_GOOD_FOR_S = 120.0        # a known-good build's success stands this long (a batch of compile errors pays once)
_known_good: dict[tuple, float] = {}


def known_good_fault(compiler: str, flags: list[str], link_flags: list[str], limits: BuildLimits) -> str | None:
    """After a build failed and no rule named the machine: the same compiler, flags, link flags,
    limits and TMPDIR on a file known to build, compiled and linked. Where that fails too, the machine failed the build (a broken
    toolchain, a limit, the disk), said with what it printed; None where it builds (the code failed).
    A success is kept for _KNOWN_GOOD_FOR_S seconds in this process."""
    key = (compiler, tuple(flags), tuple(link_flags), str(scratch_folder()), limits)
    if time.monotonic() - _known_good.get(key, -1e9) < _KNOWN_GOOD_FOR_S:
        return None
    try:
        # in a room behind the same wall: a wall that kept the compiler from its own files fails this too
        with build_room(read=(str(SHIM_HEADER.parent),)) as room:
            (room.path / "known_good.cu").write_text(KNOWN_GOOD)
            ran = run_limited([compiler, *flags, "-c", "-o", "known_good.o", "known_good.cu"], limits, room)
            if ran.proc.returncode == 0 and not ran.over:
                ran = run_limited([compiler, "-shared", *link_flags, "-o", "known_good.so", "known_good.o"], limits,
                                  room)
    except InfrastructureError as exc:
        return str(exc)
    except OSError as exc:
        return f"{compiler} could not be run ({exc.strerror or exc})"
    proc, over = ran.proc, ran.over
    if proc.returncode == 0 and not over:
        _known_good[key] = time.monotonic()
        return None
    lines = (over or (proc.stdout + proc.stderr)).strip().splitlines()
    said = [ln.strip() for ln in lines if "error" in ln.lower()][-2:] or lines[-1:]
    return (f"a file known to build fails here too with the same compiler and flags ({Path(compiler).name}: "
            f"{' / '.join(said) or 'no output'}): the toolchain, a limit or the disk of this machine, not the "
            "code. Check the compiler runs (`" + Path(compiler).name + " --version`), the limits (`ulimit -a`) and "
            "the free space of TMPDIR")


def _alone(room: Room, compiler: str, flags: list[str], backend: Backend, plan: Plan) -> str:
    """The student's file compiled on its own, with the build's flags and without the harness
    (nvcc to no output; g++ checking the syntax only): its output with the cache's copy named as
    the student's file, or "" where it compiles so (the error is in how the harness calls it).
    Only after a failed build: a missing brace otherwise swallows the harness and the student
    sees only errors in system headers."""
    source = room.path / "submission.cu"
    quiet = [f for i, f in enumerate(flags) if not (f == "-Xptxas" and flags[i + 1: i + 2] == ["-v"])
             and not (f == "-v" and flags[i - 1: i] == ["-Xptxas"])]         # ptxas's resource lines: not here
    args = [compiler, *quiet, *backend.toolchain.alone_flags, str(source)]
    ran = run_limited(args, plan.limits, room)
    if ran.over or ran.proc.returncode == 0:
        return ""
    name = Path(plan.user_path).name
    return (ran.proc.stdout + ran.proc.stderr).replace(str(source), name).replace(str(room.path) + "/", "")


def _cached_build(directory: Path, library: Path, obj: Path, meta: Path) -> dict | None:
    """A cached build's record where its library and object pass their seals (core/sealed.py) and
    build.json reads; otherwise every output is removed, said on stderr, and None: built again."""
    problem = sealed.check(library, full=True) or sealed.check(obj, full=True)
    data = None
    if not problem:
        try:
            data = json.loads(meta.read_text())
            if not (isinstance(data, dict) and isinstance(data.get("log"), str) and isinstance(data.get("compiler"), str)
                    and isinstance(data.get("resources"), list)):
                problem, data = "build.json is not the record a build writes", None
            else:
                [KernelResources(**r) for r in data["resources"]]
        except (OSError, ValueError, TypeError) as exc:
            problem, data = f"build.json cannot be read ({exc})", None
    if data is not None:
        return data
    if "no valid seal" not in problem:             # a build of a grader before seals: rebuilt quietly
        sealed.say_healed(f"build {directory.name}", problem)
    for path in (library, obj, meta, *directory.glob("device-*.fatbin"), *directory.glob("*.binutils.json")):
        sealed.unlink_with_seal(path)
    return None


def _strip_ninja(log: str) -> str:
    keep = [ln for ln in log.splitlines() if not ln.startswith(("FAILED: ", "ninja: ", "["))]
    return "\n".join(keep)


# nvcc:  dir/submission.cu(12): error: identifier "foo" is undefined
# g++:   dir/submission.cu:12:5: error: 'foo' was not declared in this scope
