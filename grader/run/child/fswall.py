"""The child's file-system wall: what a child that runs submission code may read and write.

The seccomp filter (guard.c) stops writes, sockets and new processes, but an open for reading is a
system call every program makes. This wall is grader/core/fswall.py's (Landlock), applied to the
child after the grader has loaded and mapped everything it needs (its own modules, numpy, the
reference and guard libraries, the case's input files, the device code) and before the
submission's code loads. From then on the child, and any thread it starts, may open:

- read-only: what every walled step may (core/fswall.py's base_rules: the system's folders, the
  entries of /proc that are not processes), its own /proc/<pid> and /sys (the driver reads them),
  the interpreter's standard library, and the packages this process had already imported (numpy,
  torch where timed), the grader's own package excepted;
- read-only, one file each: every other file this process has mapped (a library in the grader's
  cache, the input files), so that the cache's folder stays closed;
- read and write, one file each: the device files (/dev/null and the like; on a GPU the GPU's),
  never a folder of /dev (with TMPDIR on /dev/shm, the children's folders lie there);
- read and write: the child's private folder (its working directory, which holds only the copy
  of the one library it loads).

Everything else (the class folder, every report folder, the grader's cache and package, home
folders, the rest of TMPDIR, other processes' command lines, environments and folders in /proc)
answers EACCES. A path that leads there through a link, /proc/self/cwd, /proc/<pid>/root or a
relative path is refused all the same: Landlock checks the file reached, not the name used. What
took effect is reported (Confinement); where the kernel has no Landlock the child runs unconfined
for reads, its result says so, and the rubric's limits.require_read_wall refuses to grade
instead (checked by the parent before any child starts).

The counters' process (Nsight Compute's child, which replays device code alone) is the one child
without it: ncu's injected library failed behind it on the H100.

Only the standard library here (and core/fswall.py, which is the same): the child applies it
before the submission loads, and nothing of it may be imported after (the wall itself would
refuse the read)."""

from __future__ import annotations

import ctypes
import os
import sys
import time

from grader.core.fswall import IOCTL_DEV, REFER, TRUNCATE, Confinement, Rules, base_rules, every_right, landlock_abi, under
from grader.core.fswall import confine as _wall

__all__ = ["Confinement", "IOCTL_DEV", "REFER", "TRUNCATE", "confine", "every_right", "landlock_abi", "plan"]


def other_threads() -> int:
    """The threads of this process besides the calling one."""
    try:
        return max(0, len(os.listdir("/proc/self/task")) - 1)
    except OSError:
        return 0


def mapped_files() -> list[str]:
    """Every regular file this process maps now (its libraries, the input files)."""
    found = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) == 6 and parts[5].startswith("/"):
                    path = parts[5].rstrip("\n")
                    if not path.endswith(" (deleted)"):
                        found.append(path)
    except OSError:
        pass
    return sorted(set(found))


def imported_packages(exclude: list[str]) -> list[str]:
    """The folders of the top-level packages and modules imported so far (where a late import of
    theirs reads), those beneath exclude left out."""
    roots = set()
    for name, module in list(sys.modules.items()):
        if "." in name:
            continue
        origin = getattr(module, "__file__", None)
        if not origin:
            continue
        folder = os.path.dirname(os.path.realpath(origin))
        if os.path.basename(origin).startswith("__init__."):
            roots.add(folder)
        elif not under(folder, exclude):
            roots.add(origin if os.path.isfile(origin) else folder)
    return sorted(r for r in roots if not under(r, exclude))


def rules(*, private: str, grader_package: str, gpu: tuple[str, ...] = (), extra_writable: tuple[str, ...] = (),
          extra_readable: tuple[str, ...] = ()) -> Rules:
    """The child's Rules (the module's docstring). private: the child's own folder; grader_package:
    the grader's folder, kept out even where it lies beneath a readable one's parent; gpu: the GPU's
    device files too (its backend's device_files). extra_readable: more folders to read (the counters' process: Nsight Compute's
    injected library loads more of its own folder when it first profiles)."""
    base = base_rules(gpu=gpu, own_pid=os.getpid(), sys_folder=True)
    writable = tuple(os.path.realpath(p) for p in (private, *extra_writable) if os.path.exists(p))
    stdlib = os.path.dirname(os.path.realpath(os.__file__))     # not sysconfig: it imports lazily, and fails under -S
    package = os.path.realpath(grader_package)
    out = base.plus(write=writable, read=(stdlib,))
    out = out.plus(read=tuple(imported_packages([package])))
    out = out.plus(read=tuple(os.path.realpath(p) for p in extra_readable if os.path.isdir(p)))
    return out.plus(read=tuple(mapped_files()))


def plan(*, private: str, grader_package: str, gpu: tuple[str, ...] = (), extra_writable: tuple[str, ...] = (),
         extra_readable: tuple[str, ...] = ()) -> tuple[list[str], list[str]]:
    """The paths left readable and writable: (readable, writable); the device files are in neither."""
    r = rules(private=private, grader_package=grader_package, gpu=gpu, extra_writable=extra_writable,
              extra_readable=extra_readable)
    return list(r.read), list(r.write)


def confine(*, private: str, grader_package: str, gpu: tuple[str, ...] = (), extra_writable: tuple[str, ...] = (),
            extra_readable: tuple[str, ...] = (), dumpable: bool = False) -> Confinement:
    """Apply the child's wall to this process (every thread it starts from now on). Never raises:
    where the kernel offers no Landlock, or a step fails, the Confinement says why. The process is
    made undumpable first, unless dumpable (the caller makes it so itself, later, before any
    submission code runs)."""
    start = time.perf_counter()
    if not dumpable:
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)    # PR_SET_DUMPABLE 0: no process of its user reads its memory
    try:
        planned = rules(private=private, grader_package=grader_package, gpu=gpu, extra_writable=extra_writable,
                        extra_readable=extra_readable)
    except Exception as exc:  # noqa: BLE001 - a grade goes on, and says its reads were not confined
        return Confinement(False, f"reads not confined: {type(exc).__name__}: {exc}")
    done = _wall(planned)
    done.ms = round((time.perf_counter() - start) * 1000, 3)
    if done.confined:
        done.threads_outside = other_threads()
        if done.threads_outside:
            done.detail += f" ({done.threads_outside} thread(s) started before it, the driver's, are outside it)"
    return done
