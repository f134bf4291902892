"""Running a build within its limits: wall time and memory for every compiler process, each
build in a process group of its own that ends with the grader, and, when a build runs out of
time or memory, which compiler stage it was in (cicc, ptxas, ...), said in the student's terms.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass

from grader.core import processes
from grader.core.limits import set_clamped
from grader.core.processes import set_death_signal


@dataclass(frozen=True)
class BuildLimits:
    """What one compile may take: wall time and memory (address space of each compiler process)."""

    time_s: float = 120.0
    memory_mib: int = 8192


# A build runs at this much lower priority: in a batch the compiles of the next students took the
# cores from the measuring process in the GPU's lane (its sampling took 0.23 s instead of 0.09 s
# on a 16-core H200 host), and in a lone grade from the children's start.
BUILD_NICE = 5


# What each compiler process is doing, for a build that ran out of time or memory.
_STAGES = {"cicc": "cicc, CUDA's optimiser (a huge unrolled loop or a template explosion?)",
           "ptxas": "ptxas, which assembles the GPU code (a huge unrolled loop?)",
           "cudafe++": "cudafe++, CUDA's front end (deeply nested templates?)",
           "cc1plus": "the host C++ compiler (deeply nested templates or a huge function?)",
           "nvlink": "nvlink", "fatbinary": "fatbinary", "ld": "the linker"}


def run_limited(args: list[str], limits: BuildLimits) -> tuple[subprocess.CompletedProcess, str]:
    """Run a build command in its own process group under a time limit and a per-process memory
    cap (RLIMIT_AS, inherited by every compiler it starts); ('', why) when a limit stopped it."""
    import resource
    import signal

    cap = limits.memory_mib * 1024 * 1024

    def preexec() -> None:
        os.setsid()
        os.nice(BUILD_NICE)
        set_death_signal(signal.SIGTERM)              # the grader killed: ninja ends its compilers
        set_clamped(resource.RLIMIT_AS, cap)          # an inherited lower hard limit stands

    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=preexec)
    processes.started(proc.pid, proc)
    try:
        return _wait_build(proc, args, limits)
    finally:
        processes.ended(proc.pid)
        if proc.poll() is None:                       # interrupted while it ran
            end_build(proc)


def _wait_build(proc: subprocess.Popen, args: list[str], limits: BuildLimits) -> tuple[subprocess.CompletedProcess, str]:
    try:
        out, err = proc.communicate(timeout=limits.time_s)
    except subprocess.TimeoutExpired:
        stage = _running_stage(proc.pid)
        end_build(proc)
        out, err = proc.communicate()
        why = (f"the build took longer than its limit of {limits.time_s:g} s"
               + (f", while running {stage}" if stage else "") + "; simplify the code (fewer unrolled iterations, "
               "fewer template instances) and submit again")
        return subprocess.CompletedProcess(args, -9, out, err), why
    text = out + err
    if proc.returncode != 0 and re.search(r"out of memory|cannot allocate memory|std::bad_alloc|"
                                          r"virtual memory exhausted|Killed signal", text, re.I):
        stage = next((name for key, name in _STAGES.items() if key in text), "")
        why = (f"the build ran out of its memory limit of {limits.memory_mib} MiB"
               + (f" in {stage}" if stage else "") + "; simplify the code and submit again")
        return subprocess.CompletedProcess(args, proc.returncode, out, err), why
    return subprocess.CompletedProcess(args, proc.returncode, out, err), ""


def end_build(proc: subprocess.Popen) -> None:
    """Stop a build: ninja runs each command in a process group of its own and, on SIGTERM, ends
    them; then SIGKILL for ninja's own group."""
    import signal

    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=5)
    except (subprocess.TimeoutExpired, ProcessLookupError):
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _running_stage(pgid: int) -> str:
    """The compiler stage running in a build's process group (the deepest one found)."""
    found = ""
    for _, comm, _ in processes.in_groups({pgid}):
        if comm in _STAGES and (not found or list(_STAGES).index(comm) < list(_STAGES).index(found)):
            found = comm
    return _STAGES.get(found, "")
