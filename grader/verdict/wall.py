"""What the sandbox stopped: a blocked system call, a forged result channel, the host-memory
cap, a filter that could not be installed where the rubric requires one."""

from __future__ import annotations

from grader.run import protocol
from grader.core.contract import DoneFrame, FatalFrame
from grader.core.results import Result, SourceNote
from grader.exercises.rubric import Rubric
from grader.run.sandbox import ChildRun


_MEMORY_WORDS = ("MemoryError", "out of memory", "bad_alloc", "Cannot allocate memory")


def stopped_by_wall(run: ChildRun, fatal: FatalFrame | None, rubric: Rubric, result: Result, p: str) -> bool:
    """What the sandbox stopped: a blocked system call, a forged result channel, the host-memory
    cap, a filter that could not be installed where the rubric requires one. True when the
    result was stopped here."""
    blocked = [b for b in run.blocked if b.action == "blocked"]
    audit = [b for b in run.blocked if b.action == "audit"]
    if audit:
        counts: dict[str, int] = {}
        for b in audit:
            counts[b.name] = counts.get(b.name, 0) + 1
        result.sandbox["audit"] = dict(sorted(counts.items()))
        result.sandbox["audit_open_paths"] = sorted({b.path for b in audit if b.path})[:200]
    if blocked:
        lines = list(dict.fromkeys(b.describe() for b in blocked))
        result.stop("rejected", "Stopped by the grader's sandbox: " + "; ".join(lines) + ". Nothing it attempted "
                    "happened. A submission computes in kernels and launches them; it may not start programs, "
                    "processes or connections, or write files.")
        result.flags.append("blocked_by_sandbox")
        result.notes += [SourceNote(p, None, "blocked by the sandbox", line) for line in lines]
        return True
    if run.signal_name == "SIGSYS":
        result.stop("rejected", "Stopped by the grader's sandbox: your code made a system call the grader blocks, "
                    "with every signal blocked at the time (as system() and popen() do when they start a program), so "
                    "it could not be named. Nothing it attempted happened.")
        result.flags.append("blocked_by_sandbox")
        return True
    if any(b.action == "malformed" for b in run.blocked) or run.stream_problem == protocol.TAMPERED:
        result.stop("rejected", f"Stopped: {protocol.TAMPERED}. A submission may print to stdout and stderr, but "
                    "never write to the grader's own file descriptors.")
        result.flags.append("blocked_by_sandbox")
        return True
    if result.sandbox and not result.sandbox.get("seccomp") and rubric.limits.require_seccomp:
        result.stop("infrastructure_error", "the system-call filter could not be installed here ("
                    f"{result.sandbox.get('seccomp_detail', 'unknown')}) and the rubric requires it "
                    "(limits.require_seccomp): grade on a Linux machine that allows seccomp.")
        return True
    cap = rubric.limits.host_memory_mib
    base_rss = result.sandbox.get("rss_at_load_mib", 0)
    said = " ".join((fatal.error if fatal else "", run.stderr.text()[-4000:]))
    grew = run.max_rss_kib / 1024 - base_rss
    finished = any(isinstance(f.data, DoneFrame) for f in run.frames)
    if not finished and not run.timed_out and (any(w in said for w in _MEMORY_WORDS) or grew >= 0.9 * cap):
        result.stop("crashed", f"your code used more than {cap} MiB of host memory (limits.host_memory_mib, beyond "
                    f"what the grader itself holds; the child peaked at {run.max_rss_kib / 1024:.0f} MiB), so its "
                    "allocations failed. Free what you allocate, and allocate nothing per thread.")
        result.flags.append("host_memory_exceeded")
        return True
    return False
