"""What the sandbox stopped: a blocked system call, a forged result channel, the host-memory
cap, a filter that could not be installed where the rubric requires one."""

from __future__ import annotations

from grader.core.contract import DoneFrame, FatalFrame
from grader.core.outcomes import Outcome
from grader.core.results import SandboxSummary, SourceNote, Stop
from grader.exercises.rubric import Rubric
from grader.run import protocol
from grader.run.sandbox import ChildRun

_MEMORY_WORDS = ("MemoryError", "out of memory", "bad_alloc", "Cannot allocate memory")


def audited(run: ChildRun) -> tuple[dict[str, int], list[str]]:
    """Audit mode: each system call the filter saw, how often, and the paths opened."""
    audit = [b for b in run.blocked if b.action == "audit"]
    counts: dict[str, int] = {}
    for b in audit:
        counts[b.name] = counts.get(b.name, 0) + 1
    return dict(sorted(counts.items())), sorted({b.path for b in audit if b.path})[:200]


def read_wall_stop(rubric: Rubric, reported: SandboxSummary | None) -> Stop | None:
    """infrastructure_error where a child read unconfined and the rubric requires the file-system wall."""
    unconfined = reported.unconfined_reads() if reported is not None else ""
    if not unconfined or not rubric.limits.require_read_wall:
        return None
    return Stop(Outcome.INFRASTRUCTURE_ERROR, f"the file-system wall could not be put up here ({unconfined}) and the "
                "rubric requires it (limits.require_read_wall): grade on Linux 5.13 or later with Landlock "
                "enabled (CONFIG_SECURITY_LANDLOCK, and landlock in the lsm= boot option).")


def stopped_by_wall(run: ChildRun, fatal: FatalFrame | None, rubric: Rubric, reported: SandboxSummary | None,
                    p: str) -> Stop | None:
    """What the sandbox stopped: a blocked system call, a forged result channel, the host-memory
    cap, a filter that could not be installed where the rubric requires one (reported: what the
    child said was in force; None when it said nothing). None when the wall stopped nothing."""
    blocked = [b for b in run.blocked if b.action == "blocked"]
    if blocked:
        lines = list(dict.fromkeys(b.describe() for b in blocked))
        return Stop(Outcome.REJECTED, "Stopped by the grader's sandbox: " + "; ".join(lines) + ". Nothing it attempted "
                    "happened. A submission computes in kernels and launches them; it may not start programs, "
                    "processes or connections, or write files.",
                    [SourceNote(p, None, "blocked by the sandbox", line) for line in lines], ["blocked_by_sandbox"])
    if run.signal_name == "SIGSYS":
        return Stop(Outcome.REJECTED, "Stopped by the grader's sandbox: your code made a system call the grader blocks, "
                    "with every signal blocked at the time (as system() and popen() do when they start a program), so "
                    "it could not be named. Nothing it attempted happened.", flags=["blocked_by_sandbox"])
    if any(b.action == "malformed" for b in run.blocked) or run.stream_problem == protocol.TAMPERED:
        return Stop(Outcome.REJECTED, f"Stopped: {protocol.TAMPERED}. A submission may print to stdout and stderr, but "
                    "never write to the grader's own file descriptors.", flags=["blocked_by_sandbox"])
    if reported is not None and not reported.seccomp and rubric.limits.require_seccomp:
        return Stop(Outcome.INFRASTRUCTURE_ERROR, "the system-call filter could not be installed here ("
                    f"{reported.seccomp_detail or 'unknown'}) and the rubric requires it "
                    "(limits.require_seccomp): grade on a Linux machine that allows seccomp.")
    unwalled = read_wall_stop(rubric, reported)
    if unwalled is not None:
        return unwalled
    cap = rubric.limits.host_memory_mib
    base_rss = (reported.rss_at_load_mib if reported else None) or 0
    said = " ".join((fatal.error if fatal else "", run.stderr.text()[-4000:]))
    grew = run.max_rss_kib / 1024 - base_rss
    finished = any(isinstance(f.data, DoneFrame) for f in run.frames)
    if not finished and not run.timed_out and (any(w in said for w in _MEMORY_WORDS) or grew >= 0.9 * cap
                                               or run.memory_killed):
        return Stop(Outcome.CRASHED, f"your code used more than {cap} MiB of host memory (limits.host_memory_mib, beyond "
                    f"what the grader itself holds; the child peaked at {run.max_rss_kib / 1024:.0f} MiB), so its "
                    "allocations failed. Free what you allocate, and allocate nothing per thread.",
                    flags=["host_memory_exceeded"])
    return None
