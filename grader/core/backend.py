"""Where a submission runs, as an object: each backend carries what differs (its toolchain, the
classes its child runs, each capability a field of its own), and every step asks it.

Two backends: CUDA (the submission's kernels on a GPU, checked and timed, in two children: the
recorder and the measuring process) and EMULATOR (kernel and host code compiled with g++ against
the CPU shim and run in one child: a correctness verdict, no timing). "auto" is resolved once, by
toolchain.gpuinfo.resolve_backend, where the GPU can be probed; everything after it is handed the
Backend, the child too (in its Job). The name is only what result.json, the child's command line
and --backend say: named() turns it back into the object at those edges, and no module outside
this file, toolchain/gpuinfo.py and the command line compares it (tests/test_layers.py checks).
A new backend is a Backend here plus the files its fields name (docs/architecture.md lists them).
"""

from __future__ import annotations

from dataclasses import dataclass

from grader.core.errors import UsageError

AUTO = "auto"


@dataclass(frozen=True)
class Toolchain:
    """How a backend builds the submission and the reference kernels into a shared library
    (toolchain/build.py reads every field; none of it is decided by the backend's name)."""

    compiler: str                           # the tool that compiles and links (toolchain/tools.py finds it)
    flags: tuple[str, ...]                  # compile flags; {arch} is the GPU's architecture, {shim} the shim header
    reference_flags: tuple[str, ...]        # the same for the grader's reference kernels
    library_flags: tuple[str, ...]          # how the compiler links the shared library
    alone_flags: tuple[str, ...]            # the student's file compiled alone after a failed build (no output)
    shim: bool = False                      # the source is rewritten for the CPU shim and compiled against it
    resources: bool = False                 # the compiler reports registers, spills and static memory (ptxas -v)
    runtime: bool = False                   # the reference library carries the child's runtime helpers (runtime.cu)
    device_code: str = ""                   # what the replay loads from the build ("fatbin": nvcc's fatbinaries; "": none)
    profiler: str = ""                      # the tool that reads the hardware's counters (run/profiling.py: "ncu"; "": none)
    lambda_flags: tuple[str, ...] = ()      # added for a file with __device__ lambdas (source.uses_device_lambdas)
    host_flags: tuple[str, ...] = ()        # how the compiler builds the grader's host-only code (the recorder)


@dataclass(frozen=True)
class ChildClasses:
    """The classes (module:Class) the child instantiates for a job's role (core/contract.py's Role):
    run (the submission's library loaded and run, or the grader's own kernels alone), record (its
    launcher called on stand-ins), replay (its device code alone) and profile (the replay's timed
    call once, under a profiler that reads the hardware's counters); "" where the backend has none."""

    run: str
    record: str = ""
    replay: str = ""
    profile: str = ""

    def modules(self) -> list[str]:
        paths = (self.run, self.record, self.replay, self.profile)
        return list(dict.fromkeys(path.partition(":")[0] for path in paths if path))      # each module once


@dataclass(frozen=True)
class Backend:
    name: str
    about: str                              # one line for --help and docs
    toolchain: Toolchain
    child: ChildClasses
    on_gpu: bool = False                    # needs a GPU: a device index, its lane, its architecture, a context
    times: bool = False                     # measures speed (the emulator's verdict is correctness alone)
    private_cases: bool = False             # random cases from a secret chosen per run (exercises/plan.py); else the rubric's seeds
    records_then_replays: bool = False      # host code runs in a recorder; a process that never loads it replays the launches
    reverse_check: bool = False             # a second run in reverse block order may be asked for (rubric emulator.reverse_order_check)
    baseline: bool = False                  # the rubric's PyTorch baseline can run beside it (torch on the device)
    checked_by: "Backend | None" = None    # whose toolchain judges the CUDA first and builds the code findings read
    # The device files of its GPU (prefixes of their paths): what a child on the GPU may open behind its
    # wall (core/fswall.py), and what the recorder without a GPU must not hold open.
    device_files: tuple[str, ...] = ()

    def target(self, arch: str) -> str:
        """What a build is for: the GPU's architecture, or the CPU."""
        return arch if self.on_gpu else "cpu"

    def __str__(self) -> str:
        return self.name


_NVCC = ("-O3", "-lineinfo", "-std=c++17", "-arch={arch}", "-Xcompiler", "-fPIC")
# What code brought from elsewhere (PyTorch's extensions, CUB's and thrust's examples) is built
# with: constexpr host functions (std::max, std::numeric_limits) called in kernels, and, in a file
# that has them, __device__ lambdas. Each only accepts more: code that compiles without them
# compiles the same with them, to the same SASS. --extended-lambda alone costs about 0.6 s a build
# (nvcc 13.0, 1.1 -> 1.75 s for float4_launcher.cu on the 2-core CPU machine): only where it is needed.
CUDA = Backend(
    "cuda", about="on the GPU: checked against float64 and timed against the copy floor",
    toolchain=Toolchain(compiler="nvcc", flags=(*_NVCC[:4], "--expt-relaxed-constexpr", "-Xptxas", "-v", *_NVCC[4:]),
                        reference_flags=_NVCC,
                        library_flags=("-nodlink", "-Xcompiler", "-fPIC"), alone_flags=("-c", "-o", "/dev/null"),
                        resources=True, runtime=True, device_code="fatbin", profiler="ncu",
                        lambda_flags=("--extended-lambda",),
                        host_flags=("-x", "c++", "-O3", "-std=c++17", "-Xcompiler", "-fPIC")),
    child=ChildClasses(run="grader.run.child.backends:CudaBackend", record="grader.run.child.recorder:RecordingBackend",
                       replay="grader.run.child.measurer:ReplayBackend",
                       profile="grader.run.child.measurer:ReplayBackend"),
    on_gpu=True, times=True, private_cases=True, records_then_replays=True, baseline=True,
    device_files=("/dev/nvidia",))
# DWARF 4, not g++ 12's default 5: binutils' addr2line names the wrong file of a DWARF 5 line table,
# and the fault report needs the student's file and line. -fno-gnu-unique: the shim's inline
# variables (the thread indices, the fiber switch) would otherwise be STB_GNU_UNIQUE, which the
# dynamic linker shares between the reference library and the submission's despite RTLD_LOCAL.
# (toolchain/build.py's emulator_flags adds what a file's barriers or a large launch need.)
_SHIM = ("-x", "c++", "-std=c++17", "-O2", "-gdwarf-4", "-fPIC", "-fno-gnu-unique", "-U_FORTIFY_SOURCE",
         "-fno-strict-aliasing", "-include", "{shim}", "-w")
EMULATOR = Backend(
    "emulator", about="on the CPU, through the CUDA shim: checked, never timed",
    toolchain=Toolchain(compiler="g++", flags=_SHIM, reference_flags=_SHIM, library_flags=("-fPIC",),
                        alone_flags=("-fsyntax-only",), shim=True),
    child=ChildClasses(run="grader.run.child.emulator:EmulatorBackend"),
    reverse_check=True, checked_by=CUDA)
BACKENDS = {b.name: b for b in (CUDA, EMULATOR)}
CHOICES = (AUTO, *BACKENDS)             # what --backend accepts


def named(name: "str | Backend") -> Backend:
    """The backend called name ('cuda' or 'emulator'; not 'auto', which only resolve_backend decides):
    for the edges where a backend arrives as its name (a command line, a result.json)."""
    if isinstance(name, Backend):
        return name
    try:
        return BACKENDS[name]
    except KeyError:
        raise UsageError(f"unknown backend {name!r}: use one of {', '.join(CHOICES)}") from None
