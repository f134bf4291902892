"""Where a submission runs, as an object: each backend carries what differs (its toolchain, the
classes its child runs, each capability a field of its own), and every step asks it.

Two backends: CUDA (the submission's kernels on a GPU, checked and timed, in two children: the
recorder and the measuring process) and EMULATOR (kernel and host code compiled with g++ against
the CPU shim and run in one child: a correctness verdict, no timing). "auto" is resolved once, by
toolchain.gpuinfo.resolve_backend, where the GPU can be probed; everything after it is handed the
Backend, the child too (in its Job). The name is only what result.json, the child's command line
and --backend say: named() turns it back into the object at those edges, and no module outside
this file, toolchain/gpuinfo.py and the command line compares it (tests/test_layers.py checks).
Every fact that belongs to one vendor's GPU (the variable that picks its devices, its driver
library, its device files, its disassembler, its architectures' limits, the architecture built for
without a GPU to ask) is a field here: the rest of the package asks the Backend it was handed.
A new backend is a Backend here plus the files its fields name (docs/architecture.md lists them;
tests/test_new_backend.py checks that no other file names a CUDA-only fact).
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
    templates: str                          # its folder of grader/templates: the harness (and the recorder) it builds
    shim: bool = False                      # the source is rewritten for the CPU shim and compiled against it
    resources: bool = False                 # the compiler reports registers, spills and static memory (ptxas -v)
    runtime: bool = False                   # the reference library carries the child's runtime helpers (runtime.cu)
    device_code: str = ""                   # what the replay loads from the build ("fatbin": nvcc's fatbinaries; "": none)
    profiler: str = ""                      # the tool that reads the hardware's counters (run/profiling.py: "ncu"; "": none)
    lambda_flags: tuple[str, ...] = ()      # added for a file with __device__ lambdas (source.uses_device_lambdas)
    host_flags: tuple[str, ...] = ()        # how the compiler builds the grader's host-only code (the recorder)
    disassembler: Disassembler | None = None    # reads the build's GPU code (analysis/sass.py); None: nothing to read


@dataclass(frozen=True)
class Disassembler:
    """How a build's GPU code is read as machine instructions under their source lines
    (analysis/sass.py runs it; toolchain/tools.py finds each tool by its name)."""

    extract: tuple[str, ...]                # splits the object's GPU code into files in the working folder ({object})
    extracted: str                          # the files extract writes (a glob); the last is disassembled
    listing: tuple[str, ...]                # disassembles one of them ({file}) with each instruction's source line
    install: str                            # how to get both tools where they are missing

    @property
    def tools(self) -> tuple[str, str]:
        return self.extract[0], self.listing[0]


@dataclass(frozen=True)
class Api:
    """The runtime a backend's source speaks, by the names the grader's steps use: what the screen
    refuses, what the recorder wraps, what the replay and the messages to the student name. Its
    values are the backend's own module's (core/cudaapi.py's CUDA_RUNTIME, which the emulator
    shares: it runs the same CUDA source through its shim); every other module reads them here."""

    refused: tuple[tuple[str, str], ...]    # the screen: (a pattern on an imported function's plain name, why and what instead)
    startup: str                            # the screen: the runtime's own load-time symbols (a pattern's alternatives)
    startup_entries: str                    # the screen: its start-up entries in .init_array (a pattern's alternatives)
    wrapped: tuple[str, ...]                # the recorder's link: the entry points wrapped so it sees every launch
    stream: str                             # the stream's type: a launcher's last parameter
    allocate: str                           # the call that allocates a launcher's workspace
    memset: str                             # ... that sets device memory
    to_symbol: str                          # ... that copies to a __device__ variable
    launch: str                             # a launch by call, without <<<...>>>
    launch_cooperative: str                 # its cooperative form
    launch_ex: str                          # a launch with attributes
    launch_attribute: str                   # the prefix of the attribute types (its ID: launch_attribute + "ID")
    texture_types: tuple[str, ...]          # the texture and surface objects' types
    error: str                              # an error code's type, as a message names it ("(cudaError 9)")
    error_check: str                        # the check a student writes for the last error
    tokens: tuple[str, ...] = ()            # the calls and types a copy's comparison keeps as themselves (analysis/similarity.py)

    def code_text(self, code: int) -> str:
        """An error code as a message names it: "cudaError 9"."""
        return f"{self.error} {code}"

    def coded(self, code: int) -> str:
        """An error code as a message ends with it: "(cudaError 9)"."""
        return f"({self.code_text(code)})"

    def code_in(self, text: str) -> int:
        """The code coded() left at the end of text; -1 where there is none."""
        head, sep, tail = text.rpartition(f"({self.error} ")
        try:
            return int(tail.rstrip(")")) if sep else -1
        except ValueError:
            return -1


@dataclass(frozen=True)
class SmLimits:
    """What one multiprocessor of an architecture holds (for CUDA, the programming guide's table):
    what analysis/launches.py computes a launch's occupancy from where the runtime gave none."""

    max_warps: int
    max_blocks: int
    registers: int = 65536
    register_unit: int = 256          # registers are allocated per warp, in units of this many
    max_registers_per_thread: int = 255
    sub_partitions: int = 4
    shared_bytes: int = 233472        # the most shared memory an SM can give to blocks
    shared_reserved_per_block: int = 1024
    shared_unit: int = 128
    sms: int = 132                    # SMs of the arch's flagship part, where the GPU cannot be asked
    warp: int = 32                    # threads a warp holds


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
    api: Api | None = None                  # the runtime its source speaks (the screen, the recorder, the replay read it)
    on_gpu: bool = False                    # needs a GPU: a device index, its lane, its architecture, a context
    times: bool = False                     # measures speed (the emulator's verdict is correctness alone)
    # random cases from a secret chosen per run (exercises/plan.py); else the rubric's seeds
    private_cases: bool = False
    records_then_replays: bool = False      # host code runs in a recorder; a process that never loads it replays the launches
    # a second run in reverse block order may be asked for (rubric emulator.reverse_order_check)
    reverse_check: bool = False
    # The emulator's thread check (the suite's: dataclasses.replace(EMULATOR, thread_check=True)): each
    # call a thread count could change runs on one OS thread and on several; a difference ends the grade.
    thread_check: bool = False
    baseline: bool = False                  # the rubric's PyTorch baseline can run beside it (torch on the device)
    checked_by: "Backend | None" = None    # whose toolchain judges the CUDA first and builds the code findings read
    # The device files of its GPU (prefixes of their paths): what a child on the GPU may open behind its
    # wall (core/fswall.py), what the recorder without a GPU must not hold open (run/child/walls.py), and
    # what an open after the wall is read as (run/child/guard.py). A GPU backend must name them: with none,
    # the recorder's check would pass without checking anything (__post_init__ refuses it).
    device_files: tuple[str, ...] = ()
    # The environment variable that picks the GPUs a process sees (run/lanes.py reads it, run/sandbox.py
    # sets it to a child's device, toolchain/gpuinfo.py reads it hiding every GPU); "" without a GPU.
    visible_devices: str = ""
    # The variables of the grader's environment its children keep (run/spawn.py): the device choice,
    # a container runtime's, where its toolkit lies.
    environment: tuple[str, ...] = ()
    # The driver library a child opens for its context (run/child/worker.py's preload, the measuring
    # process's driver calls); "" where the backend has none.
    driver_library: str = ""
    # The architecture built for where no GPU can be asked (`grader explain` on a machine without one).
    default_arch: str = ""
    # An architecture's name from its compute capability (toolchain/gpuinfo.py: major, minor).
    arch_name: str = ""
    # Each architecture's multiprocessor limits, by name (analysis/launches.py); pairs, so the Backend
    # stays hashable.
    architectures: tuple[tuple[str, SmLimits], ...] = ()

    def __post_init__(self) -> None:
        if self.on_gpu and not self.device_files:
            raise ValueError(f"the {self.name} backend runs on a GPU but names no device_files: name its device "
                             "files' path prefixes (device_files=('/dev/...',)), or the recorder without a GPU "
                             "would be checked against nothing")
        if self.on_gpu and not self.visible_devices:
            raise ValueError(f"the {self.name} backend runs on a GPU but names no visible_devices variable: name the "
                             "environment variable that picks its devices, or a child's device cannot be chosen")

    def limits(self, arch: str) -> SmLimits | None:
        """arch's multiprocessor limits; None for one the table lacks (or the CPU)."""
        return dict(self.architectures).get(arch)

    def arch_of(self, major: int | str, minor: int | str) -> str:
        """The architecture of a device with this compute capability."""
        return self.arch_name.format(major=major, minor=minor)

    def target(self, arch: str) -> str:
        """What a build is for: the GPU's architecture, or the CPU."""
        return arch if self.on_gpu else "cpu"

    def __str__(self) -> str:
        return self.name


_NVCC = ("-O3", "-lineinfo", "-std=c++17", "-arch={arch}", "-Xcompiler", "-fPIC")
# A compile stops after this many errors, its preprocessor's (#error) and its front end's alike: a file
# that includes itself under #error otherwise printed hundreds of megabytes (issue 70; what is read
# of the output is bounded as well, toolchain/running.py and outcome.py).
_ERROR_LIMIT = 20
# What code brought from elsewhere (PyTorch's extensions, CUB's and thrust's examples) is built
# with: constexpr host functions (std::max, std::numeric_limits) called in kernels, and, in a file
# that has them, __device__ lambdas. Each only accepts more: code that compiles without them
# compiles the same with them, to the same SASS. --extended-lambda alone costs about 0.6 s a build
# (nvcc 13.0, 1.1 -> 1.75 s for float4_launcher.cu on the 2-core CPU machine): only where it is needed.
# Only sm_90 of the architectures is checked against the runtime's own occupancy (tests/test_gpu.py,
# on an H200); the others follow the same rules with their table's limits.
_SM = (("sm_80", SmLimits(max_warps=64, max_blocks=32, shared_bytes=167936, sms=108)),
       ("sm_86", SmLimits(max_warps=48, max_blocks=16, shared_bytes=102400, sms=84)),
       ("sm_89", SmLimits(max_warps=48, max_blocks=24, shared_bytes=102400, sms=128)),
       ("sm_90", SmLimits(max_warps=64, max_blocks=32, sms=132)),
       ("sm_100", SmLimits(max_warps=64, max_blocks=32, sms=148)),
       ("sm_120", SmLimits(max_warps=48, max_blocks=32, shared_bytes=102400, sms=170)))
# The CUDA runtime (and driver) as the grader's steps name it: core/backend.py's Api, CUDA's values.
# Both backends speak it (the emulator runs the same source through its shim).
CUDA_RUNTIME = Api(
    # What the screen refuses (analysis/screening.py): a pattern on an imported function's plain name,
    # why it is refused and what to do instead.
    refused=(
        (r"^(cudaStream(Create|Destroy)|cuStream(Create|Destroy))",
         "creates or destroys a stream: the grader replays your launcher's work on the stream it is given, the one it "
         "times; launch and copy on that stream (events, synchronisation and cudaGetLastError are fine)"),
        (r"^(cuda(MallocHost|HostAlloc|HostRegister|HostUnregister|MallocManaged|MallocPitch|Malloc3D|"
         r"MallocArray|MallocMipmapped|FreeHost|FreeArray|FreeMipmapped|MemPool|DeviceSetMemPool|"
         r"MallocFromPoolAsync)|cu(MemAlloc|MemFree|MemHostAlloc|MemPool|MemCreate|MemMap))",
         "allocates memory the replay cannot reproduce (host, managed, pitched, array or pooled memory): allocate a "
         "device workspace with cudaMalloc or cudaMallocAsync, or work in the buffers you are given"),
        (r"^(cuda(Memcpy(2D|3D|Peer|FromSymbol|Array|ToArray|FromArray|Batch)\w*|Memset(2D|3D)\w*|"
         r"MemPrefetch\w*|MemAdvise\w*|GetSymbolAddress)|cu(Memcpy|Memset|MemPrefetch|MemAdvise))",
         "copies or sets memory in a way the replay cannot reproduce (2D and 3D copies, peer copies, reading a symbol "
         "back, a symbol's device address on the host, the driver's copies): use cudaMemcpyAsync, cudaMemsetAsync or "
         "cudaMemcpyToSymbol on the buffers you are given, your workspace or your __device__ variables"),
        (r"^(cuda(DeviceSetLimit|ThreadSetLimit|CtxResetPersistingL2Cache|StreamSetAttribute|"
         r"DeviceSetCacheConfig|ThreadSetCacheConfig|DeviceSetSharedMemConfig|DeviceReset|"
         r"SetDeviceFlags|DeviceSetGraphMemAttribute|GraphicsMap)|cu(CtxSetLimit|CtxResetPersistingL2Cache|"
         r"StreamSetAttribute|CtxSetCacheConfig|DevicePrimaryCtx))",
         "changes device-wide settings (limits, L2 persistence, cache configuration, resetting the device): they "
         "would change what the copies your kernel is compared with measure, and the replay does not repeat them; "
         "cudaFuncSetAttribute on your own kernel is allowed"),
        (r"^(cuda(Graph|StreamBeginCapture|StreamEndCapture|LaunchHostFunc|StreamAddCallback|UserObject)|"
         r"cu(Graph|StreamBeginCapture|StreamEndCapture|LaunchHostFunc|StreamAddCallback))",
         "captures graphs or adds host callbacks: launch your kernels directly with <<<...>>> on the stream you "
         "are given"),
        # cudaLaunchKernelEx itself is recorded (a launch with no attribute is replayed, one with
        # attributes refused: replaying.py); the driver's form is not
        (r"^cuLaunchKernelEx",
         "launches with the driver's cuLaunchKernelEx, whose attributes can set cache policy for the timed launch: "
         "use <<<grid, block, shared, stream>>> (or cudaLaunchKernelEx with no attributes)"),
    ),
    # What the C++ and CUDA runtimes' own start-up code calls: registration of the fat binary,
    # kernels and __device__ variables, <iostream>'s ios_base::Init, atexit.
    startup=(r"__cudaRegister\w*|__cudaUnregister\w*|__cudaInitModule|atexit|__cxa_atexit|__dso_handle|"
             r"_ZNSt8ios_base4Init[CD][12]Ev|_GLOBAL_OFFSET_TABLE_|__stack_chk_fail|_Znw\w*|_Zna\w*|_Zdl\w*|_Zda\w*|"
             r"memset|memcpy|memmove|__nv_\w+|____nv_\w+|__sti____cudaRegisterAll\w*|__cudaUnregisterBinaryUtil\w*|"
             r"_ZL\d+__nv_\w+|_ZL\d+__sti____cudaRegisterAll\w*|_ZL\d+__cudaUnregisterBinaryUtil\w*"),
    startup_entries=r"_GLOBAL__sub_I_|_GLOBAL__I_|__sti____cudaRegisterAll|_ZL\d+__sti",
    # The runtime's launch entry points and kernel attribute setters, wrapped at link time so that
    # the harness's recorder sees every launch of the submission's kernels (<<<>>> compiles to
    # __cudaLaunchKernel) and runs none (toolchain/flags.py, run/child/replay.py). The stream-ordered
    # work beside the launches (memsets, copies, copies to symbols, the workspace's allocations) is
    # wrapped the same way, and __cudaRegisterVar so the recorder knows each __device__ variable's
    # device name.
    wrapped=("__cudaLaunchKernel", "__cudaLaunchKernel_ptsz", "cudaLaunchKernel", "cudaLaunchKernel_ptsz",
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
             "cudaGetDevice", "cudaSetDevice", "cudaGetDeviceCount", "dlopen"),
    stream="cudaStream_t", allocate="cudaMalloc", memset="cudaMemset", to_symbol="cudaMemcpyToSymbol",
    launch="cudaLaunchKernel", launch_cooperative="cudaLaunchCooperativeKernel", launch_ex="cudaLaunchKernelEx",
    launch_attribute="cudaLaunchAttribute", texture_types=("cudaTextureObject_t", "cudaSurfaceObject_t"),
    error="cudaError", error_check="cudaGetErrorString(cudaGetLastError())",
    tokens=("cudaStream_t", "cudaError_t", "cudaSuccess", "cudaGetLastError", "cudaLaunchKernel", "cudaMemcpy",
            "cudaMemcpyAsync", "cudaMalloc", "cudaFree", "cudaDeviceSynchronize", "cudaStreamSynchronize",
            "cudaOccupancyMaxActiveBlocksPerMultiprocessor", "cudaDeviceGetAttribute", "cudaGetDevice"))
CUDA = Backend(
    "cuda", about="on the GPU: checked against float64 and timed against the copy floor",
    toolchain=Toolchain(compiler="nvcc", flags=(*_NVCC[:4], "--expt-relaxed-constexpr", "-Xptxas", "-v", *_NVCC[4:],
                                                "-Xcompiler", f"-fmax-errors={_ERROR_LIMIT}",
                                                "-Xcudafe", f"--error_limit={_ERROR_LIMIT}"),
                        reference_flags=_NVCC,
                        library_flags=("-nodlink", "-Xcompiler", "-fPIC"), alone_flags=("-c", "-o", "/dev/null"),
                        templates="cuda",
                        resources=True, runtime=True, device_code="fatbin", profiler="ncu",
                        lambda_flags=("--extended-lambda",),
                        host_flags=("-x", "c++", "-O3", "-std=c++17", "-Xcompiler", "-fPIC"),
                        disassembler=Disassembler(
                            extract=("cuobjdump", "-xelf", "all", "{object}"), extracted="*.cubin",
                            listing=("nvdisasm", "-g", "-c", "{file}"),
                            install="install the CUDA toolkit, or `pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm`")),
    child=ChildClasses(run="grader.run.child.cuda:CudaBackend", record="grader.run.child.recorder:RecordingBackend",
                       replay="grader.run.child.measurer:ReplayBackend",
                       profile="grader.run.child.measurer:ReplayBackend"),
    api=CUDA_RUNTIME, on_gpu=True, times=True, private_cases=True, records_then_replays=True, baseline=True,
    device_files=("/dev/nvidia",), visible_devices="CUDA_VISIBLE_DEVICES",
    environment=("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_HOME"), driver_library="libcuda.so.1",
    default_arch="sm_90", arch_name="sm_{major}{minor}", architectures=_SM)
# DWARF 4, not g++ 12's default 5: binutils' addr2line names the wrong file of a DWARF 5 line table,
# and the fault report needs the student's file and line. -fno-gnu-unique: the shim's inline
# variables (the thread indices, the fiber switch) would otherwise be STB_GNU_UNIQUE, which the
# dynamic linker shares between the reference library and the submission's despite RTLD_LOCAL.
# (toolchain/build.py's emulator_flags adds what a file's barriers or a large launch need.)
_SHIM = ("-x", "c++", "-std=c++17", "-O2", "-gdwarf-4", "-fPIC", "-fno-gnu-unique", "-U_FORTIFY_SOURCE",
         "-fno-strict-aliasing", "-include", "{shim}", "-w")
EMULATOR = Backend(
    "emulator", about="on the CPU, through the CUDA shim: checked, never timed",
    toolchain=Toolchain(compiler="g++", flags=(*_SHIM, f"-fmax-errors={_ERROR_LIMIT}"), reference_flags=_SHIM,
                        library_flags=("-fPIC",),
                        alone_flags=("-fsyntax-only",), templates="emulator", shim=True),
    child=ChildClasses(run="grader.run.child.emulator:EmulatorBackend"), api=CUDA_RUNTIME,
    reverse_check=True, checked_by=CUDA)
BACKENDS = {b.name: b for b in (CUDA, EMULATOR)}
CHOICES = (AUTO, *BACKENDS)             # what --backend accepts
# Every GPU backend's device files: what an open after the wall is read as (run/child/guard.py, which
# reads a report without knowing whose GPU it was).
GPU_DEVICE_FILES = tuple(dict.fromkeys(f for b in BACKENDS.values() for f in b.device_files))


def named(name: "str | Backend") -> Backend:
    """The backend called name ('cuda' or 'emulator'; not 'auto', which only resolve_backend decides):
    for the edges where a backend arrives as its name (a command line, a result.json)."""
    if isinstance(name, Backend):
        return name
    try:
        return BACKENDS[name]
    except KeyError:
        raise UsageError(f"unknown backend {name!r}: use one of {', '.join(CHOICES)}") from None
