"""What a build passes its compiler and linker: a toolchain's flags with the architecture and the
emulator's shim filled in, what a file's barriers or a large launch add against the shim, the
link flags that wrap the runtime's entry points for the recorder, and the shim's own text (part of
every emulator build's cache key). Imports only core.
"""

from __future__ import annotations

import os

from grader.core.backend import Api, Toolchain
from grader.core.locations import PACKAGE_DIR

SHIM_HEADER = PACKAGE_DIR / "shim" / "cuda_shim.h"
LAUNCH_LOG_HEADER = PACKAGE_DIR / "shim" / "launch_log.h"    # the harness's and the shim's launch log


def recorder_link_flags(api: Api) -> tuple[str, ...]:
    """The link flags that wrap the runtime's entry points (api.wrapped: its launches, its
    stream-ordered work, its registration of __device__ variables), so that the harness's recorder
    sees every launch of the submission's kernels and runs none (grader/run/child/replay.py)."""
    return tuple(f for name in api.wrapped for f in ("-Xlinker", f"--wrap={name}"))


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
