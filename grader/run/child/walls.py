"""The child's limits and walls, put up between the grader's loads and the submission's: the
device heap, the host-memory cap and the drop of privileges (apply_limits), then the file-system
wall (fswall.py) and the seccomp filter (guard.py), and only then the submission's library or
device code (behind_the_wall). The recorder without a GPU is checked here to hold none of its
backend's device files before its wall goes up.

Imports only core/ and run/ (its child modules: the walls, the guard, the replay's window).
"""

from __future__ import annotations

import ctypes
import os
import resource
import sys
import time
from typing import Callable

from grader.core import cgroups
from grader.core.contract import ChildSandbox, GuardMode, Job, Limits, Role
from grader.core.limits import clamp, spread_threads
from grader.core.locations import PACKAGE_DIR
from grader.run.child import fswall, guard
from grader.run.child.backends import libc
from grader.run.child.replay import reserve_window

NOBODY = 65534


def _vm_bytes(field: str) -> int | None:
    """A Vm line of /proc/self/status (VmData, VmSize), in bytes."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


# Where no control group counts the child's memory and it holds no CUDA context (the emulator's child,
# the recorder without a GPU), its address space is capped (RLIMIT_AS: every mapping counted, shared
# ones and a memfd's too) at what it has mapped when the cap is set (the recorder's stand-in window, a
# reservation of 1 TiB with nothing behind it, is mapped by then: replay.reserve_window) plus the
# allowance plus this room for each thread it may start (a stack of 8 MiB and its guard; a malloc
# arena a thread cannot reserve, glibc does without, sharing another). A CUDA context reserves far
# more address space than it uses (on the H100, scripts/contract-probe.py --cuda: 14.0 GiB of VmSize
# for a context and a 1 GiB allocation, 118 MiB resident; cuInit fails under an 8 GiB RLIMIT_AS), so
# a GPU's children keep RLIMIT_DATA alone without a control group until the lead has measured, on a
# GPU, whether a cap set after the context (VmSize then + the allowance) holds a whole grade.
ADDRESS_SPACE_PER_THREAD = 16 << 20


def apply_limits(backend, limits: Limits, *, own_memory: cgroups.OwnMemory | None = None, cap_address_space: bool = False,
                 grader_bytes: int = 0, threads: int = 1) -> ChildSandbox:
    """The device heap, the host-memory cap and the drop of privileges; what took effect.

    The host cap is what this process holds now plus the allowance (host_memory_mib): the grader's
    own baseline (torch, the CUDA context, the shared area for the outputs, allocated by then:
    charge_before_the_cap) is not the submission's to pay for. It is counted whole, held by
    the first that applies: own_memory, the control group the grader made for this child (every
    page, shared mappings, a memfd and /dev/shm included); else, where cap_address_space (no CUDA
    context here), RLIMIT_AS (plus grader_bytes, the shared area mapped later, and
    ADDRESS_SPACE_PER_THREAD for each of threads); else RLIMIT_DATA alone, which counts private
    memory only (result.json's sandbox.host_memory_how says which). RLIMIT_DATA is set in every
    case: past it an allocation fails (the student is told) before the group's limit kills.
    """
    report = ChildSandbox()
    backend.workspace_cap = limits.workspace_bytes          # what the launcher may cudaMalloc (the emulator's shim)
    heap = limits.device_heap_bytes
    if heap:
        code = backend.set_device_heap(heap)
        report.device_heap_bytes = heap if code == 0 else None
    cap_mib = limits.host_memory_mib
    base = _vm_bytes("VmData")
    if cap_mib and base is not None:
        allowance = cap_mib * 1024 * 1024
        cap = base + allowance
        try:
            soft, _ = clamp(resource.RLIMIT_DATA, cap)
            if soft < cap:
                report.host_memory_lowered_to_mib = round((soft - base) / 2**20)
            resource.setrlimit(resource.RLIMIT_DATA, (soft, soft))
            report.host_memory_mib = cap_mib
            report.host_memory_base_mib = round(base / 2**20)
            report.host_memory_how = _whole(own_memory, cap_address_space, allowance, grader_bytes, threads)
        except (ValueError, OSError) as exc:
            report.host_memory_mib = None
            report.host_memory_problem = str(exc)
    elif own_memory is not None:
        own_memory.close()                  # no cap asked for: its group counts, limits nothing
    if os.geteuid() == 0:
        if limits.drop_privileges:
            try:
                os.setgroups([])
                os.setresgid(NOBODY, NOBODY, NOBODY)
                os.setresuid(NOBODY, NOBODY, NOBODY)
                report.privileges = f"dropped from root to uid {NOBODY}"
            except OSError as exc:
                report.privileges = f"root (could not drop: {exc})"
        else:
            report.privileges = "root (drop_privileges is off)"
    else:
        report.privileges = f"unprivileged uid {os.geteuid()}"
    return report


def charge_before_the_cap(fd: int, nbytes: int) -> None:
    """The grader's shared area for the outputs, its pages allocated now (the outputs fill it
    later): in what the child holds when its memory cap is set (apply_limits), so that the cap is
    the submission's alone, never room the grader's outputs were to take."""
    try:
        os.posix_fallocate(fd, 0, nbytes)
    except OSError:
        pass                                # filled as the outputs are sent, as before


def _whole(own_memory: cgroups.OwnMemory | None, cap_address_space: bool, allowance: int, grader_bytes: int,
           threads: int) -> str:
    """The cap that counts every page (apply_limits), set: how, in result.json's words."""
    if own_memory is not None:
        try:
            used = own_memory.used()          # the grader's shared area among it (charge_before_the_cap)
            if own_memory.limit(used + allowance):
                return (f"{own_memory.version} memory limit of {(used + allowance) >> 20} MiB ({used >> 20} MiB held "
                        "when set): every page counted, shared mappings too")
        except (OSError, ValueError, IndexError):
            pass
        finally:
            own_memory.close()
    if cap_address_space:
        size = _vm_bytes("VmSize")
        if size is not None:
            cap = size + allowance + grader_bytes + threads * ADDRESS_SPACE_PER_THREAD
            soft, _ = clamp(resource.RLIMIT_AS, cap)
            resource.setrlimit(resource.RLIMIT_AS, (soft, soft))
            return (f"RLIMIT_AS of {soft >> 20} MiB of address space ({size >> 20} MiB mapped when set): every "
                    "mapping counted, shared ones too; memfd_create refused (a memory file never mapped is no address "
                    "space) and no /dev/shm file can be made (no control group could be made here)")
    return ("RLIMIT_DATA alone: private memory counted, shared mappings (MAP_SHARED, a memfd, /dev/shm) not "
            "(no control group here, and a CUDA context's address space rules out RLIMIT_AS)")


def behind_the_wall(make_backend: Callable[[], object], job: Job, guard_fd: int, *,
                    late: bool = False) -> tuple[object, ChildSandbox]:
    """The job's backend (make_backend()), the limits, then the wall, then (only then) the
    submission's library or device code: (the backend, what took effect).

    late (the recorder on the GPU, which runs the submission's host code with a real context): the
    file-system wall first, then the backend, whose CUDA context is made behind it, so that every
    thread the driver starts (one runs the host callbacks a launcher may enqueue, by a name it
    computed, where no wrapped runtime call sees it) is behind the wall too; then the limits and the
    privileges, then seccomp (on every thread, the driver's included)."""
    wall = guard.Guard(job.guard_library)
    own_memory = cgroups.OwnMemory.find()       # its files opened before the wall goes up
    backend = None if late else make_backend()
    if job.role == Role.RECORD:
        reserve_window(libc())      # no host memory the launcher can name lies where stand-ins do
    if job.offline:
        if not job.offline.driver_stand_in:
            raise RuntimeError("the recorder without a GPU was given no stand-in driver: it records on the GPU instead")
        # Where a launcher looks for the driver (dlopen of libcuda.so.1, RTLD_NOLOAD or not), it finds
        # this one, loaded as the recorder on the GPU loads the real one (before its privileges go):
        # every entry point ends the process (NEEDS_GPU_EXIT), and the launcher is recorded on the GPU.
        ctypes.CDLL(job.offline.driver_stand_in)
    # Imports so far may cache their bytecode (torch's saves seconds a run); inside the
    # wall a .pyc write would be a blocked call, so a late import only reads.
    sys.dont_write_bytecode = True
    memory = dict(own_memory=own_memory, cap_address_space=not job.backend.on_gpu or bool(job.offline),
                  grader_bytes=job.shared_bytes, threads=spread_threads(job.emulator_threads) + 4)
    if late:
        backend, sandbox, reads = _walled_then_made(make_backend, job, memory)
    else:
        sandbox = apply_limits(backend, job.limits, **memory)
        reads = read_wall(job)
    sandbox.reads_confined, sandbox.reads_detail, sandbox.read_wall_ms = reads
    mode = {GuardMode.AUDIT: guard.AUDIT, GuardMode.PROFILE: guard.PROFILE}.get(job.guard_mode, guard.ENFORCE)
    if job.limits.require_read_wall and not sandbox.reads_confined and job.role != Role.PROFILE:
        # before any of the submission's code: nothing it could print or read here ever exists
        raise Unwalled(sandbox)
    if job.offline:
        opened = gpu_files_open(job.backend.device_files)
        if opened:
            raise RuntimeError(f"the recorder without a GPU has the GPU's device files open ({', '.join(opened)}): "
                               "it records on the GPU instead")
        if mode == guard.ENFORCE:
            mode = guard.OFFLINE             # and no driver call from now on: no ioctl but a terminal's
    if sandbox.host_memory_mib and memory["cap_address_space"] and not (own_memory and own_memory.holding):
        mode |= guard.NO_MEMFD               # RLIMIT_AS holds the cap: a memory file never mapped would escape it
    status = wall.install(mode=mode, report_fd=guard_fd)
    sandbox.seccomp, sandbox.seccomp_detail = status.seccomp, status.detail
    sandbox.filter_instructions, sandbox.filter_install_ms = status.filter_instructions, status.install_ms
    sandbox.gpu_memory_free_bytes, sandbox.gpu_memory_total_bytes = backend.memory()
    sandbox.rss_at_load_mib = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    t_load = time.perf_counter()
    if job.library or job.role in (Role.REPLAY, Role.PROFILE):     # `grader calibrate` runs only the grader's own kernels
        backend.load_submission(job.library)    # the measuring process may raise Refused (main sends it)
    sandbox.submission_load_ms = round((time.perf_counter() - t_load) * 1000, 3)
    if job.library:
        sandbox.emulator_threads = backend.launch_threads()
    return backend, sandbox


def _walled_then_made(make_backend: Callable[[], object], job: Job, memory: dict) -> tuple[object, ChildSandbox, tuple]:
    """behind_the_wall's late order: the file-system wall, then the backend (cuInit here: every thread
    the driver starts is behind the wall), then the undumpable mark and the limits; (the backend,
    the limits that took effect, what read_wall said)."""
    if job.reference_library:
        ctypes.CDLL(job.reference_library, mode=ctypes.RTLD_LOCAL)      # mapped: readable behind the wall
    # The driver loaded (not started: no cuInit, no thread) before the wall, and its folder left
    # readable, wherever it is installed: cuInit loads libraries of its own from beside it.
    ctypes.CDLL(job.backend.driver_library)
    beside = tuple(sorted({os.path.dirname(p) for p in fswall.mapped_files()
                           if os.path.basename(p).startswith(job.backend.driver_library.partition(".so")[0] + ".so")}))
    reads = read_wall(job, late=True, readable=beside)
    try:
        backend = make_backend()
    except RuntimeError as exc:             # the load's fatal frame: infrastructure_error, the machine's
        raise RuntimeError(f"the CUDA context could not be made in the recorder, behind its file-system wall "
                           f"({exc}): the machine's fault, not the submission's (a GPU out of memory or held by "
                           "another process, or a driver that needs a file the wall does not open: docs/design.md, "
                           "'The recorder on a GPU')") from exc
    undumpable()
    return backend, apply_limits(backend, job.limits, **memory), reads


class Unwalled(Exception):
    """The file-system wall did not go up and the rubric requires it: the submission is not loaded."""

    def __init__(self, sandbox: ChildSandbox):
        super().__init__(sandbox.reads_detail)
        self.sandbox = sandbox


def read_wall(job: Job, *, late: bool = False, readable: tuple[str, ...] = ()) -> tuple[bool, str, float]:
    """The file-system wall (fswall.py): after everything the grader reads is loaded or mapped,
    before the submission's code. Not in the counters' process: it runs none of the submission's
    host code (the recording's device code alone, as the measuring process does), and Nsight
    Compute's injected library, which runs in it, failed behind the wall on the H100 (error 11)
    even with its own folders readable; its seccomp filter (profile mode) stays.

    late: the CUDA context is made behind it, and the driver's start writes beneath its own
    /proc/<pid>/task (its threads' entries): on the H100, cuInit answered 304 behind the wall without
    that, root or not, and 0 with it (no other grant was needed). The seccomp filter, put up before
    the submission's code, refuses every open for writing anyway. The process is made undumpable
    once the context is made (undumpable()), before anything of the submission's runs. readable: more
    folders to read (the driver's own, where cuInit finds its libraries)."""
    if job.role == Role.PROFILE:
        return False, ("not put up: the counters' process runs no host code of the submission, and Nsight "
                       "Compute's injected library fails behind it"), 0.0
    gpu = job.backend.device_files if job.backend.on_gpu and not job.offline else ()
    own = (f"/proc/{os.getpid()}/task",) if late else ()
    done = fswall.confine(private=os.getcwd(), grader_package=str(PACKAGE_DIR), gpu=gpu, extra_writable=own,
                          extra_readable=readable, dumpable=late)
    detail = done.detail
    if done.threads_outside and job.role == Role.REPLAY:      # said in the student's report: what those threads may run
        detail += "; this process runs the submission's device code alone, none of its host code"
    return done.confined, detail, done.ms


def undumpable() -> None:
    """PR_SET_DUMPABLE 0: no process of this one's user reads its memory or attaches to it."""
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)


def gpu_files_open(prefixes: tuple[str, ...]) -> list[str]:
    """The GPU's device files this process holds open (the backend's device_files, /dev/nvidia* for
    CUDA): none in the recorder without a GPU, before its wall goes up (a context made by anything
    before it would outlive the wall)."""
    found = []
    try:
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if target.startswith(prefixes):
                found.append(target)
    except OSError:
        return ["/proc/self/fd unreadable"]
    return sorted(set(found))
