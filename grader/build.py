"""Building a submission (and the reference kernels) into a shared library.

The translation unit and a build.ninja are generated from templates into a
cache directory named by a hash of everything that decides the output:
the source, the generated harness, the compiler and its version, the flags
and the target. A second build of the same inputs is a cache hit and runs
no compiler. nvcc builds for the GPU; g++ with the shim header builds the
same source for the CPU emulator.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from grader import __version__
from grader.errors import InfrastructureError
from grader.render import render
from grader.rubric import Rubric
from grader.source import Submission, rewrite_for_emulator, uses_collectives

PACKAGE_DIR = Path(__file__).resolve().parent
REFERENCE_SOURCE = PACKAGE_DIR.parent / "reference" / "kernels.cu"
SHIM_HEADER = PACKAGE_DIR / "shim" / "cuda_shim.h"


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


def cache_root() -> Path:
    env = os.environ.get("GRADER_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "grader"


_INSTALL_HINTS = {
    "nvcc": "install the CUDA toolkit and put its bin/ on PATH (or set CUDA_HOME)",
    "g++": "install g++ (apt-get install g++)",
    "ninja": "pip install ninja",
    "nm": "install binutils; screening reads the compiled submission with it",
    "readelf": "install binutils; screening reads the compiled submission with it",
}


def find_tool(tool: str) -> str:
    """The tool's path; InfrastructureError saying how to install it when it is missing."""
    exe = shutil.which(tool)
    if exe is None:
        raise InfrastructureError(f"'{tool}' was not found on PATH: {_INSTALL_HINTS.get(tool, 'install it')}.")
    return exe


@functools.lru_cache(maxsize=None)
def tool_version(tool: str) -> str:
    """First meaningful line of `tool --version`; raises when the tool is missing."""
    out = subprocess.run([find_tool(tool), "--version"], capture_output=True, text=True).stdout
    lines = [ln for ln in out.splitlines() if ln.strip()]
    if tool == "nvcc":
        return next((ln.strip() for ln in lines if "release" in ln), lines[-1] if lines else "nvcc")
    return lines[0].strip() if lines else tool


def _nvcc() -> str:
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if cuda_home and (Path(cuda_home) / "bin" / "nvcc").exists():
        return str(Path(cuda_home) / "bin" / "nvcc")
    tool_version("nvcc")
    return shutil.which("nvcc") or "nvcc"


def _digest(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else p.encode())
        h.update(b"\0")
    return h.hexdigest()[:24]


def build_submission(sub: Submission, rubric: Rubric, *, backend: str, arch: str = "sm_90") -> BuildResult:
    """Build the submission for 'cuda' (nvcc, for arch) or 'emulator' (g++ + shim)."""
    kernel = rubric.kernel
    harness = render(
        "harness.cu.j2",
        version=__version__,
        backend=backend,
        has_launcher=sub.has_launcher,
        launcher=kernel.launcher,
        kernel=kernel.name,
        block_threads=kernel.block_threads,
    )
    if backend == "cuda":
        source = sub.text
        compiler = _nvcc()
        flags = ["-O3", "-lineinfo", "-std=c++17", f"-arch={arch}", "-Xptxas", "-v", "-Xcompiler", "-fPIC"]
        version = tool_version("nvcc")
        extra = ""
    else:
        source = rewrite_for_emulator(sub.text)
        compiler = shutil.which("g++") or "g++"
        tool_version("g++")
        flags = emulator_flags(fibers=uses_collectives(sub))
        version = tool_version("g++")
        extra = SHIM_HEADER.read_text()
    key = _digest(__version__, backend, source, harness, " ".join(flags), version, arch if backend == "cuda" else "cpu", extra)
    return _build(
        key=f"sub-{key}",
        files={"submission.cu": source, "harness.cu": harness},
        main="harness.cu",
        compiler=compiler,
        flags=flags,
        backend=backend,
        user_path=str(sub.path),
    )


BASELINE_SOURCE = """__global__ void biasGeluFused(const float* x, const float* bias, float* out, size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col < cols) out[blockIdx.y * cols + col] = x[blockIdx.y * cols + col] + bias[col];
}
"""


def build_baseline(rubric: Rubric, *, fibers: bool) -> BuildResult:
    """The emulator's harness around a trivial kernel: what the shim alone puts in an object,
    for screening a g++-built submission where nvcc is missing."""
    from grader.source import Submission, blank_comments_and_strings, find_kernels

    text = BASELINE_SOURCE + ("__global__ void grader_baseline_sync() { __syncthreads(); }\n" if fibers else "")
    code = blank_comments_and_strings(text)
    sub = Submission(path=Path("baseline.cu"), text=text, sha256="", code=code, kernels=find_kernels(code))
    result = build_submission(sub, rubric, backend="emulator")
    if not result.ok:
        raise InfrastructureError(f"the emulator's baseline did not build:\n{result.log}")
    return result


def build_reference(*, backend: str, arch: str = "sm_90") -> BuildResult:
    """Build reference/kernels.cu once per backend and architecture."""
    text = REFERENCE_SOURCE.read_text()
    if backend == "cuda":
        compiler, version = _nvcc(), tool_version("nvcc")
        flags = ["-O3", "-lineinfo", "-std=c++17", f"-arch={arch}", "-Xcompiler", "-fPIC"]
        extra = ""
    else:
        text = rewrite_for_emulator(text)
        compiler, version = shutil.which("g++") or "g++", tool_version("g++")
        flags = emulator_flags(fibers=False)
        extra = SHIM_HEADER.read_text()
    key = _digest(__version__, backend, text, " ".join(flags), version, arch if backend == "cuda" else "cpu", extra)
    result = _build(key=f"ref-{key}", files={"kernels.cu": text}, main="kernels.cu", compiler=compiler,
                    flags=flags, backend=backend, user_path=str(REFERENCE_SOURCE))
    if not result.ok:
        raise InfrastructureError(f"the reference kernels did not build ({result.command}):\n{result.log}")
    return result


def emulator_flags(*, fibers: bool) -> list[str]:
    """g++ flags that compile CUDA source against the shim (fibers: the file uses barriers or warp collectives).

    DWARF 4, not g++ 12's default 5: binutils' addr2line names the wrong file of a
    DWARF 5 line table, and the fault report needs the student's file and line.
    """
    flags = ["-x", "c++", "-std=c++17", "-O2", "-gdwarf-4", "-fPIC", "-U_FORTIFY_SOURCE",
             "-fno-strict-aliasing", "-include", str(SHIM_HEADER), "-w"]
    if fibers:
        flags.insert(0, "-DGRADER_EMU_FIBERS")
    return flags


def _build(*, key: str, files: dict[str, str], main: str, compiler: str, flags: list[str], backend: str,
           user_path: str) -> BuildResult:
    root = cache_root()
    directory = root / key
    directory.mkdir(parents=True, exist_ok=True)
    library = directory / "lib.so"
    obj = directory / "main.o"
    meta = directory / "build.json"
    command = " ".join([compiler, *flags, "-c", "-o", "main.o", main])
    link = " ".join([compiler, "-shared", *(["-Xcompiler", "-fPIC"] if backend == "cuda" else ["-fPIC"]), "-o", "lib.so", "main.o"])
    start = time.perf_counter()
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)        # two graders building the same file wait for each other
        if library.exists() and meta.exists():
            data = json.loads(meta.read_text())
            return BuildResult(ok=True, library=library, object=obj, cached=True, seconds=time.perf_counter() - start,
                               command=command, log=data["log"],
                               resources=[KernelResources(**r) for r in data["resources"]],
                               compiler=data["compiler"])
        for name, text in files.items():
            (directory / name).write_text(text)
        ninja_text = render("build.ninja.j2", version=__version__, command=command, link=link,
                            description=f"{backend} build of {Path(user_path).name}",
                            main=main, inputs=list(files))
        (directory / "build.ninja").write_text(ninja_text)
        proc = subprocess.run([find_tool("ninja"), "-C", str(directory), "--quiet"], capture_output=True, text=True)
        log = _strip_ninja(proc.stdout + proc.stderr)
        messages = parse_messages(log, directory, user_path)
        resources = parse_ptxas(log) if backend == "cuda" else []
        version = tool_version("nvcc" if backend == "cuda" else "g++")
        if proc.returncode != 0 or not library.exists():
            return BuildResult(ok=False, library=None, object=None, cached=False, seconds=time.perf_counter() - start,
                               command=command, log=log, messages=messages, resources=resources, compiler=version)
        meta.write_text(json.dumps({"log": log, "resources": [asdict(r) for r in resources], "compiler": version}))
        return BuildResult(ok=True, library=library, object=obj, cached=False, seconds=time.perf_counter() - start,
                           command=command, log=log, messages=messages, resources=resources, compiler=version)


def _strip_ninja(log: str) -> str:
    keep = [ln for ln in log.splitlines() if not ln.startswith(("FAILED: ", "ninja: ", "["))]
    return "\n".join(keep)


# nvcc:  dir/submission.cu(12): error: identifier "foo" is undefined
# g++:   dir/submission.cu:12:5: error: 'foo' was not declared in this scope
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


def demangle(name: str) -> str:
    """The kernel's plain name from an Itanium-mangled one (_Z13biasGeluFusedPKfS0_Pfm -> biasGeluFused)."""
    m = re.match(r"_Z(?:N\d*\w*?)?(\d+)(\w+)", name)
    if not m:
        return name
    n = int(m.group(1))
    return m.group(2)[:n]
