"""How a grading child is started: its environment, and what is set between fork and exec
(its own process group, a death signal, resource limits, no network as root).

sandbox.Worker starts every child through these. Imports only core/.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
import resource
import signal

from grader.core.backend import BACKENDS
from grader.core.limits import lowered, set_clamped
from grader.core.locations import PACKAGE_DIR
from grader.core.processes import set_death_signal

# What a child keeps of the grader's environment: these, and each backend's own (its device choice,
# its toolkit's home: core/backend.py's Backend.environment).
ENV_KEEP = ("PATH", "LANG", "LC_ALL", "LD_LIBRARY_PATH", "PYTHONPATH", "TMPDIR", "VIRTUAL_ENV", "OMP_NUM_THREADS",
            *dict.fromkeys(name for b in BACKENDS.values() for name in b.environment))


CLONE_NEWNET = 0x40000000
# Resolved here, in the parent: between fork and exec (where limits_in_child runs) the child may not
# import or dlopen anything, since another thread of the parent may have held those locks.
try:
    _UNSHARE = ctypes.CDLL(None, use_errno=True).unshare
except (OSError, AttributeError):
    _UNSHARE = None


# The recorder without a GPU runs outside the GPU's lane, beside another student's timing: at this
# much lower priority, so that a launcher's host code never takes a core from the measuring process.
BESIDE_THE_LANE_NICE = 10


def limits_in_child(cpu_seconds: int, nproc: int, nice: int = 0) -> None:
    """Runs in the child between fork and exec: its own process group, resource limits, no network,
    and (nice) a lower priority. Only system calls here: no imports, no allocation-heavy work."""
    os.setsid()                                    # its own process group: killing it kills its children too
    if nice:
        os.nice(nice)
    set_death_signal(signal.SIGKILL)               # and it dies with the grader, even a SIGKILLed one
    # Each clamped to the inherited hard limit (grader/core/limits.py): a lower one stands.
    set_clamped(resource.RLIMIT_CPU, cpu_seconds, cpu_seconds + 5)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    set_clamped(resource.RLIMIT_FSIZE, CHILD_FILE_BYTES)
    set_clamped(resource.RLIMIT_NOFILE, CHILD_OPEN_FILES)
    if os.geteuid() != 0:
        try:
            set_clamped(resource.RLIMIT_NPROC, nproc)
        except (ValueError, OSError):
            pass
    elif _UNSHARE is not None:
        _UNSHARE(CLONE_NEWNET)                     # as root: a network namespace of its own, nothing in it


CHILD_FILE_BYTES = 256 * 1024 * 1024
CHILD_OPEN_FILES = 1024


def lowered_limits(cpu_seconds: int) -> dict:
    """The child's limits that an inherited hard limit lowers (limits.lowered), for result.json."""
    return lowered({resource.RLIMIT_CPU: cpu_seconds + 5, resource.RLIMIT_FSIZE: CHILD_FILE_BYTES,
                    resource.RLIMIT_NOFILE: CHILD_OPEN_FILES})


def process_limit() -> int:
    """Threads count as processes for RLIMIT_NPROC; torch and the CUDA driver start a few dozen."""
    try:
        return len(os.listdir("/proc/self/task")) + 256
    except OSError:
        return 512


@functools.cache
def numpy_parent() -> str:
    """The folder numpy is installed in: the child runs with -S (no site-packages: a faster start)
    and imports numpy for the stopping rule (core/stats.py)."""
    spec = importlib.util.find_spec("numpy")
    return os.path.dirname(os.path.dirname(spec.origin)) if spec and spec.origin else ""


def package_parent() -> str:
    return str(PACKAGE_DIR.parent)
