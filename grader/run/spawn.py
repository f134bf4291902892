"""How a grading child is started: its environment, and what is set between fork and exec
(its own process group, a death signal, resource limits, no network as root, and on the CPU
emulator a root of its own: child_view).

sandbox.Worker starts every child through these. Imports only core/.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib.util
import os
import resource
import signal
import sys

from grader.core import cgroups, fswall
from grader.core.environment import library_path
from grader.core.folders import NOBODY
from grader.core.limits import lowered, set_clamped, usable_cores
from grader.core.locations import PACKAGE_DIR, cache_root
from grader.core.processes import set_death_signal, tasks_of_user
from grader.core.view import Entry, View

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


def limits_in_child(cpu_seconds: int, nproc: int | None, nice: int = 0, group: cgroups.Group | None = None) -> None:
    """Runs in the child between fork and exec: its own process group, its control group (group:
    memory counted whole, processes and threads bounded), (nice) a lower priority, resource limits
    and no network. nproc: RLIMIT_NPROC where no control group bounds the processes (None: none
    set). Its view, where it has one, is entered after exec, by the launcher (core/view.Entry:
    in_view). Only system calls here: no imports, no allocation-heavy work."""
    os.setsid()                                    # its own process group: killing it kills its children too
    if group is not None:
        group.attach_self()                        # before anything it starts: each is in it too
    if nice:
        os.nice(nice)
    set_death_signal(signal.SIGKILL)               # and it dies with the grader, even a SIGKILLed one
    # Each clamped to the inherited hard limit (grader/core/limits.py): a lower one stands.
    set_clamped(resource.RLIMIT_CPU, cpu_seconds, cpu_seconds + 5)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    set_clamped(resource.RLIMIT_FSIZE, CHILD_FILE_BYTES)
    if nproc is not None:
        # Counted per user: as root the child drops to nobody (run/child/walls.py) and is held from then.
        try:
            set_clamped(resource.RLIMIT_NPROC, nproc)
        except (ValueError, OSError):
            pass
    if os.geteuid() == 0 and _UNSHARE is not None:
        _UNSHARE(CLONE_NEWNET)                     # as root: a network namespace of its own, nothing in it
    # The grader's descriptors are still open here (closed just before exec): a batch's may pass the
    # 1024 this allows, which the open ones keep; the launcher's pipe (in_view) is made after exec.
    set_clamped(resource.RLIMIT_NOFILE, CHILD_OPEN_FILES)


CHILD_FILE_BYTES = 256 * 1024 * 1024
CHILD_OPEN_FILES = 1024


def lowered_limits(cpu_seconds: int) -> dict:
    """The child's limits that an inherited hard limit lowers (limits.lowered), for result.json."""
    return lowered({resource.RLIMIT_CPU: cpu_seconds + 5, resource.RLIMIT_FSIZE: CHILD_FILE_BYTES,
                    resource.RLIMIT_NOFILE: CHILD_OPEN_FILES})


# The processes and threads one child may have at once (its control group's pids.max): the emulator
# spreads a launch over every core, torch and the CUDA driver start a few dozen threads; a thread storm
# (2,000 threads, or the ~30,000 that stop the machine from forking) stops here.
def child_pids() -> int:
    return max(512, 2 * usable_cores() + 256)


def child_group() -> cgroups.Group | None:
    """A control group of its own for a child (its memory limit is set once it has loaded:
    Worker.run, then the child's own, run/child/walls.py), or None where the machine gives none."""
    return cgroups.make(memory_bytes=None, pids=child_pids(), what="run")


def child_limits(cpu_seconds: int) -> tuple[cgroups.Group | None, int | None, dict[str, str]]:
    """A child's control group (child_group), else the RLIMIT_NPROC that stands in for its pids.max
    (process_limit), and how they hold, for result.json (held_by)."""
    group = child_group()
    nproc = None if group is not None else process_limit()
    return group, nproc, held_by(group, nproc, cpu_seconds)


def held_by(group: cgroups.Group | None, nproc: int | None, cpu_seconds: int) -> dict[str, str]:
    """How the child's processes, files and CPU are bounded, in result.json's words (sandbox.limits;
    its memory: the child's own host_memory_how)."""
    processes = (f"{group.version} pids.max {group.pids}" if group is not None else
                 f"RLIMIT_NPROC {nproc}, counted over every process of the child's user (no control group "
                 "could be made here)")
    return {"processes": processes, "files": f"each file {CHILD_FILE_BYTES >> 20} MiB (RLIMIT_FSIZE)",
            "cpu": f"{cpu_seconds} s of CPU (RLIMIT_CPU, behind the wall-clock limit)"}


def process_limit() -> int:
    """RLIMIT_NPROC for a child no control group holds. The kernel counts it against every process
    and thread of the child's user (nobody where the grader is root, which every child and build of
    every grade on the machine shares; else the grader's own user): what that user runs now and
    child_pids() more. The choice: one ceiling for the user, not one per child, so a storm in one
    child of a batch can take the room of a child beside it, which then fails to start a thread
    (docs/design.md says so); only a control group (child_group) bounds each child alone."""
    uid = NOBODY if os.geteuid() == 0 else os.geteuid()
    return tasks_of_user(uid) + child_pids()


@functools.cache
def numpy_parent() -> str:
    """The folder numpy is installed in: the child runs with -S (no site-packages: a faster start)
    and imports numpy for the stopping rule (core/stats.py)."""
    spec = importlib.util.find_spec("numpy")
    return os.path.dirname(os.path.dirname(spec.origin)) if spec and spec.origin else ""


def package_parent() -> str:
    return str(PACKAGE_DIR.parent)


def python_path(*, torch: bool) -> str:
    """The child's PYTHONPATH, computed, never the grader's: the folder that holds the grader's
    package, numpy's, and with torch torch's (found without importing it), each where it lies."""
    folders = [package_parent(), numpy_parent()]
    if torch:
        spec = importlib.util.find_spec("torch")
        if spec and spec.origin:
            folders.append(os.path.dirname(os.path.dirname(spec.origin)))
    return os.pathsep.join(dict.fromkeys(f for f in folders if f))


def child_view(workdir: str) -> View:
    """The root of its own a child on the CPU emulator runs in (core/view.View, as each build's):
    only the system's folders, /proc, /sys and the usual device files, the interpreter and the
    packages the child imports (the grader's package alone, not the folder that holds it), the
    grader's cache (its own libraries and the cases' inputs, which its Landlock wall opens one file
    at a time) and its own folder. The class folder, the report folders and every home folder are
    not in it: a path there does not exist (Landlock alone answers EACCES for a file that exists
    and ENOENT for one that does not, which told a launcher which classmates had handed in).
    Entered after exec, by the launcher (Worker: in_view)."""
    stdlib = os.path.dirname(os.path.realpath(os.__file__))     # its lib-dynload beneath it
    read = [sys_path for sys_path in (sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix,
                                      os.path.dirname(os.path.realpath(sys.executable)), stdlib,
                                      sys.pycache_prefix or "")]
    read.append(str(PACKAGE_DIR))
    numpy = importlib.util.find_spec("numpy")
    if numpy is not None and numpy.origin:
        folder = os.path.dirname(numpy.origin)
        read += [folder, folder + ".libs", os.path.join(os.path.dirname(folder), "numpy.libs")]
    read += library_path().split(os.pathsep)
    cache = cache_root()
    with contextlib.suppress(OSError):      # a child may start before the first grade's build makes it
        cache.mkdir(parents=True, exist_ok=True)
    read.append(str(cache))
    rules = fswall.base_rules(sys_folder=True).plus(
        read=tuple(dict.fromkeys(os.path.realpath(p) for p in read if p and os.path.isabs(p) and os.path.exists(p))),
        write=(workdir,))
    # The view's root is mounted on an empty folder beside the child's own, never inside it: Landlock
    # follows a path up through the mount a file is reached by, so a view beneath the child's own
    # folder (which its wall lets it write) would let it read and write everything the view holds.
    root = workdir.rstrip("/") + VIEW_SUFFIX
    os.mkdir(root, 0o755)
    return View(rules, root, workdir)


# The view's root: beside the child's folder, named after it (so that a killed grader's is swept with
# its children's folders: core/folders.PREFIXES), removed with it (remove_view).
VIEW_SUFFIX = "-view"


def remove_view(workdir: str) -> None:
    """The empty folder the child's view was mounted on (in the child's namespace alone)."""
    try:
        os.rmdir(workdir.rstrip("/") + VIEW_SUFFIX)
    except OSError:
        pass


def in_view(view: View | None, said_to: int | None, args: list[str], *, launcher: str) -> tuple[list[str], tuple[int, ...]]:
    """(the command line, the descriptors to pass) of a child started in its view (child_view): the
    launcher (core/view.Entry, its path) enters it after exec, writes what it said to said_to, sets the
    death signal again (entering a user namespace clears it) and execs args; without a view, args as
    they are."""
    if view is None:
        return args, ()
    entry = Entry(launcher, view=view, said_to=said_to, death_signal=signal.SIGKILL)
    return entry.command(args), entry.fds
