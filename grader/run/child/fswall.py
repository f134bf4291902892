"""The file-system wall: what a child that runs submission code may read and write.

The seccomp filter (guard.c) stops writes, sockets and new processes, but an open for reading is a
system call every program makes. This wall is Linux's Landlock: a ruleset applied to the child
after the grader has loaded and mapped everything it needs (its own modules, numpy, the reference
and guard libraries, the case's input files, the device code) and before the submission's code
loads. From then on the child, and any thread it starts, may open:

- read-only: the system's folders (/usr, /lib*, /bin, /sbin, /etc), /proc and /sys (the driver
  reads them; another process's files there stay behind its owner's permissions and Landlock's
  own rule that a walled process reaches no process outside its wall), the interpreter's standard
  library, and the packages this process had already imported (numpy, torch where timed), the
  grader's own package excepted;
- read-only, one file each: every other file this process has mapped (a library in the grader's
  cache, the input files), so that the cache's folder stays closed;
- read and write: /dev (the GPU's device files, /dev/null, /dev/shm) and the child's private
  folder (its working directory, which holds only the copy of the one library it loads).

Everything else (the class folder, every report folder, the grader's cache and package, home
folders, the rest of TMPDIR) answers EACCES. A path that leads there through a link, /proc/self/cwd,
/proc/<pid>/root or a relative path is refused all the same: Landlock checks the file reached, not
the name used. What took effect is reported (Confinement); where the kernel has no Landlock the
child runs unconfined for reads, its result says so, and the rubric's limits.require_read_wall
refuses to grade instead.

The counters' process (Nsight Compute's child, which replays device code alone) is the one child
without it: ncu's injected library failed behind it on the H100.

Only the standard library here: the child applies it before the submission loads, and nothing of it
may be imported after (the wall itself would refuse the read)."""

from __future__ import annotations

import ctypes
import os
import sys
import time
from dataclasses import dataclass, field

# Linux's generic system call numbers (the same on x86-64 and arm64, since 5.13).
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_DUMPABLE = 4

# Access rights (include/uapi/linux/landlock.h), by the ABI that brought them.
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_ABI1_ALL = (1 << 13) - 1                    # execute .. make_sym
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
READ = EXECUTE | READ_FILE | READ_DIR

SYSTEM_FOLDERS = ("/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin", "/etc", "/proc", "/sys")
DEVICE_FOLDERS = ("/dev",)


def every_right(abi: int) -> int:
    """The access rights this ABI can restrict: all of them are handled, so none is left open."""
    rights = _ABI1_ALL
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


@dataclass
class Confinement:
    """What the file-system wall did in this process (claimed by the child, like all it reports)."""

    confined: bool
    detail: str
    ms: float = 0.0
    readable: list[str] = field(default_factory=list)     # the folders and files left readable
    writable: list[str] = field(default_factory=list)
    # Threads that existed before the wall and are not walled (Landlock walls the calling thread and
    # the threads it starts, and ABI 7 has no flag for the others): on a GPU, the CUDA driver's own,
    # which run none of the submission's code; in the emulator and the recorder without a GPU, none.
    threads_outside: int = 0


def other_threads() -> int:
    """The threads of this process besides the calling one."""
    try:
        return max(0, len(os.listdir("/proc/self/task")) - 1)
    except OSError:
        return 0


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 where there is none (an old kernel, or not enabled)."""
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    abi = libc.syscall(ctypes.c_long(_CREATE_RULESET), None, ctypes.c_size_t(0),
                       ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return int(abi) if abi > 0 else 0


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


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
        elif not _under(folder, exclude):
            roots.add(origin if os.path.isfile(origin) else folder)
    return sorted(r for r in roots if not _under(r, exclude))


def plan(*, private: str, grader_package: str, extra_writable: tuple[str, ...] = (),
         extra_readable: tuple[str, ...] = ()) -> tuple[list[str], list[str]]:
    """The paths left readable and writable: (readable, writable). private: the child's own folder;
    grader_package: the grader's folder, kept out even where it lies beneath a readable one's parent.
    extra_readable: more folders to read (the counters' process: Nsight Compute's injected library
    loads more of its own folder when it first profiles)."""
    writable = [os.path.realpath(p) for p in (*DEVICE_FOLDERS, private, *extra_writable) if os.path.exists(p)]
    readable = [p for p in SYSTEM_FOLDERS if os.path.exists(p)]
    stdlib = os.path.dirname(os.path.realpath(os.__file__))     # not sysconfig: it imports lazily, and fails under -S
    if not _under(stdlib, readable):
        readable.append(stdlib)
    package = os.path.realpath(grader_package)
    folders = readable + writable
    readable += [p for p in imported_packages([package]) if not _under(p, folders)]
    folders = readable + writable
    readable += [os.path.realpath(p) for p in extra_readable if os.path.isdir(p) and not _under(p, folders)]
    folders = readable + writable
    readable += [p for p in mapped_files() if not _under(p, folders)]
    return readable, writable


def confine(*, private: str, grader_package: str, extra_writable: tuple[str, ...] = (),
            extra_readable: tuple[str, ...] = ()) -> Confinement:
    """Apply the wall to this process (every thread it has and starts). Never raises: where the kernel
    offers no Landlock, or a step fails, the Confinement says why and nothing is restricted."""
    start = time.perf_counter()
    try:
        return _confine(start, private, grader_package, extra_writable, extra_readable)
    except Exception as exc:  # noqa: BLE001 - a grade goes on, and says its reads were not confined
        return Confinement(False, f"reads not confined: {type(exc).__name__}: {exc}", ms=_ms(start))


def _confine(start: float, private: str, grader_package: str, extra_writable: tuple[str, ...],
             extra_readable: tuple[str, ...]) -> Confinement:
    libc = _libc()
    libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)       # no other process of its user reads its memory or /proc/<pid>/
    abi = landlock_abi()
    if abi <= 0:
        err = ctypes.get_errno()
        why = {38: "this kernel has no Landlock (Linux 5.13 or later with CONFIG_SECURITY_LANDLOCK)",
               95: "Landlock is built into this kernel but not enabled (add landlock to the lsm= boot option)"}
        return Confinement(False, "reads not confined: " + why.get(err, f"Landlock unavailable ({os.strerror(err)})"),
                           ms=_ms(start))
    readable, writable = plan(private=private, grader_package=grader_package, extra_writable=extra_writable,
                              extra_readable=extra_readable)
    handled = every_right(abi)
    attr = ctypes.c_uint64(handled)
    libc.syscall.restype = ctypes.c_long
    ruleset = libc.syscall(ctypes.c_long(_CREATE_RULESET), ctypes.byref(attr), ctypes.c_size_t(8), ctypes.c_uint32(0))
    if ruleset < 0:
        return Confinement(False, f"reads not confined: the Landlock ruleset could not be made "
                           f"({os.strerror(ctypes.get_errno())})", ms=_ms(start))
    try:
        for path, rights in [(p, READ) for p in readable] + [(p, handled) for p in writable]:
            problem = _add(libc, ruleset, path, rights)
            if problem:
                return Confinement(False, f"reads not confined: {problem}", ms=_ms(start))
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return Confinement(False, f"reads not confined: no_new_privs ({os.strerror(ctypes.get_errno())})",
                               ms=_ms(start))
        if libc.syscall(ctypes.c_long(_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            return Confinement(False, f"reads not confined: landlock_restrict_self failed "
                               f"({os.strerror(ctypes.get_errno())})", ms=_ms(start))
    finally:
        os.close(ruleset)
    outside = other_threads()
    detail = f"Landlock ABI {abi}" + (f" ({outside} thread(s) started before it, the driver's, are outside it)"
                                      if outside else "")
    return Confinement(True, detail, ms=_ms(start), readable=readable, writable=writable, threads_outside=outside)


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _add(libc, ruleset: int, path: str, rights: int) -> str:
    """One rule: rights beneath path (a file takes only a file's rights). A path gone since the plan
    is skipped; any other failure is returned, said."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        if not os.path.isdir(path):
            rights &= _FILE_RIGHTS
        rule = _PathBeneath(rights, fd)
        if libc.syscall(ctypes.c_long(_ADD_RULE), ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH),
                        ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
            return f"a Landlock rule for {path} was refused ({os.strerror(ctypes.get_errno())})"
        return ""
    finally:
        os.close(fd)


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 3)
