"""The resource limits the grader sets, each clamped to the hard limit it inherited.

An HPC login node, a container or `ulimit` may have set a hard limit lower than one the grader
asks for (the address space of a build, the child's CPU seconds). Raising a hard limit is not
allowed, so asking for more than it fails (in a preexec function, as "Exception occurred in
preexec_fn"). The grader takes what it may: the lower of the two, and says which were lowered
(result.json's sandbox.lowered_limits), since a lower limit can only make a grade stricter, never
let a submission take more.

Only the resource module is used by clamp(), which runs between fork and exec. The cores this
process may run on (usable_cores) and a large emulated launch's threads (spread_threads) are here
too: limits of the machine, not of the wire format.
"""

from __future__ import annotations

import os
import resource

# A rubric's defaults for its child's wall time and kept output (exercises/schema.py's Limits), here
# so that `grader submit`'s head start (grade/launcher.py) starts the measuring process as a rubric
# with them would, before any rubric is read.
TIME_LIMIT_S = 60.0
OUTPUT_CAP_BYTES = 16384

NAMES = {resource.RLIMIT_AS: "address space (builds)", resource.RLIMIT_CPU: "CPU seconds (the child)",
         resource.RLIMIT_FSIZE: "file size (the child)", resource.RLIMIT_NOFILE: "open files (the child)",
         resource.RLIMIT_DATA: "private memory (the child)"}
if hasattr(resource, "RLIMIT_NPROC"):
    NAMES[resource.RLIMIT_NPROC] = "processes and threads (the child)"


def clamp(kind: int, soft: int, hard: int | None = None) -> tuple[int, int]:
    """(soft, hard) for setrlimit: what the grader wants, no higher than the inherited hard limit."""
    hard = soft if hard is None else hard
    _, inherited = resource.getrlimit(kind)
    if inherited != resource.RLIM_INFINITY:
        hard = min(hard, inherited)
        soft = min(soft, hard)
    return soft, hard


def set_clamped(kind: int, soft: int, hard: int | None = None) -> None:
    resource.setrlimit(kind, clamp(kind, soft, hard))


def lowered(wanted: dict[int, int]) -> dict[str, dict]:
    """Of the limits the grader wants (kind -> value), those the inherited hard limit lowers, by
    name: {name: {"wanted": value, "inherited": hard}}."""
    out = {}
    for kind, value in wanted.items():
        _, inherited = resource.getrlimit(kind)
        if inherited != resource.RLIM_INFINITY and inherited < value:
            out[NAMES.get(kind, str(kind))] = {"wanted": value, "inherited": inherited}
    return out


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity: `taskset -c 0` makes it one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def spread_threads(requested: int) -> int:
    """The OS threads a large emulated launch may use (Job.emulator_threads): requested, or every
    usable core when 0, and never more than those cores. A child inherits its parent's cores, so
    the parent (for the child's CPU-time limit) and the child agree."""
    cores = usable_cores()
    return max(1, min(requested, cores) if requested > 0 else cores)
