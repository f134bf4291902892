"""What a build passes its compiler and linker: a toolchain's flags with the architecture and the
emulator's shim filled in, what a file's barriers or a large launch add against the shim, the
link flags that wrap the runtime's entry points for the recorder, and the shim's own text (part of
every emulator build's cache key). Imports only core.
"""

from __future__ import annotations

import os

from grader.core.backend import Toolchain
from grader.core.locations import PACKAGE_DIR

SHIM_HEADER = PACKAGE_DIR / "shim" / "cuda_shim.h"
LAUNCH_LOG_HEADER = PACKAGE_DIR / "shim" / "launch_log.h"    # the harness's and the shim's launch log

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


def compile_flags(tc: Toolchain, flags: tuple[str, ...], *, arch: str, fibers: bool = False,
                  spread: bool = False) -> list[str]:
    """A toolchain's flags with the architecture and the shim header filled in; against the shim,
    what the file's barriers or a large launch need (emulator_flags)."""
    if tc.shim:
        return emulator_flags(flags, fibers=fibers, spread=spread)
    return [f.format(arch=arch, shim=SHIM_HEADER) for f in flags]


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
