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
from grader.core.errors import InfrastructureError
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

    # no input: nothing a compiler is asked to read can wait on the grader's terminal
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=preexec)
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
        starved = _starved(proc.pid, limits)
        end_build(proc)
        out, err = proc.communicate()
        if starved:
            raise InfrastructureError(starved)
        why = (f"the build took longer than its limit of {limits.time_s:g} s"
               + (f", while running {stage}" if stage else "") + "; simplify the code (fewer unrolled iterations, "
               "fewer template instances) and submit again")
        return subprocess.CompletedProcess(args, -9, out, err), why
    text = out + err
    # (a compiler killed by a signal from outside, "Killed signal terminated program", is the machine's:
    # build.machine_fault; the limit here makes an allocation fail, and the compiler says so)
    if proc.returncode != 0 and re.search(r"out of memory|cannot allocate memory|std::bad_alloc|"
                                          r"virtual memory exhausted", text, re.I):
        stage = next((name for key, name in _STAGES.items() if key in text), "")
        why = (f"the build ran out of its memory limit of {limits.memory_mib} MiB"
               + (f" in {stage}" if stage else "") + "; simplify the code and submit again")
        return subprocess.CompletedProcess(args, proc.returncode, out, err), why
    return subprocess.CompletedProcess(args, proc.returncode, out, err), ""


# A build past its wall-time limit that got less than this share of it in CPU time, on a machine whose
# load leaves each runnable process less than this share of a core, waited for the machine, not for its
# code (a load just above the cores, as any batch makes, explains a small shortfall, never half).
_STARVED_SHARE = 0.5


def _starved(pgid: int, limits: BuildLimits) -> str:
    """Why a build that ran out of wall time is the machine's (its compilers got less than
    _STARVED_SHARE of the limit in CPU time while the machine's load gave each runnable process less
    than _STARVED_SHARE of a core), or "" where the time went to the code."""
    cpu = processes.group_cpu_seconds(pgid)
    load = os.getloadavg()[0]
    cores = os.cpu_count() or 1
    if cpu is None or cpu >= _STARVED_SHARE * limits.time_s or cores / max(load, 1e-9) >= _STARVED_SHARE:
        return ""
    return (f"the build ran past its limit of {limits.time_s:g} s of wall time having had only {cpu:.1f} s of CPU: "
            f"this machine was too busy (load {load:.1f} on {cores} cores), not the code. Grade it again with fewer "
            "grades at once (`--jobs`) or on a quieter machine; no student is graded for this.")


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
