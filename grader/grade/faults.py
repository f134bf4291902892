"""The machine's faults as a grade meets them: what a grade raised that is the machine's (a limit,
a full or read-only disk, the build cache), said as such with the fix, never as the student's and
never as an internal error (pipeline.whatever_happens says them: only the pipeline writes a
Result)."""

from __future__ import annotations

import errno
import resource

from grader.core.locations import cache_root
from grader.exercises.rubric import Rubric


def machine_limit(exc: Exception) -> str | None:
    """What to do about an error that is the machine's (a limit, a full or read-only disk), or
    None for one that is a bug of ours. Python says a thread it could not start (EAGAIN at the
    process limit, which counts threads) as RuntimeError("can't start new thread")."""
    def soft(which: int) -> str:
        value = resource.getrlimit(which)[0]
        return "unlimited" if value == resource.RLIM_INFINITY else str(value)

    memory = memory_limit()
    # The dynamic loader's mmap refused while importing an extension module (numpy's, under `ulimit -v`
    # the grade's address space ran out there as often as in an allocation): the same want of memory.
    unmapped = isinstance(exc, ImportError) and any(
        words in str(exc).lower() for words in ("failed to map segment", "cannot allocate memory"))
    if isinstance(exc, MemoryError) or unmapped or (isinstance(exc, OSError) and exc.errno == errno.ENOMEM):
        return memory or ("the machine ran out of memory (" + (str(exc) or type(exc).__name__) + "): a grade takes "
                          "about 1.5 GiB; free memory, or grade with fewer --jobs, and grade again.")
    starting = (isinstance(exc, RuntimeError) and "can't start new thread" in str(exc)) or \
        (isinstance(exc, OSError) and exc.errno == errno.EAGAIN)
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    if starting and memory and (nproc == resource.RLIM_INFINITY or nproc >= 4096):
        return memory            # a thread's stack is address space: under `ulimit -v` pthread_create says EAGAIN,
        #                          and a process limit in the thousands is not what stopped one more thread
    if isinstance(exc, RuntimeError) and "can't start new thread" in str(exc):
        return (f"the grader could not start a thread (the process limit counts threads): raise it (`ulimit -u`, "
                f"now {soft(resource.RLIMIT_NPROC)}) to at least a few hundred and grade again.")
    if not isinstance(exc, OSError):
        return None

    if exc.errno in (errno.EFBIG, errno.ENOSPC, errno.EDQUOT):
        return no_room(exc)
    if exc.errno in (errno.EMFILE, errno.ENFILE):
        return (f"the grader ran out of file descriptors ({exc.strerror}): raise the open-files limit (`ulimit -n`, "
                f"now {soft(resource.RLIMIT_NOFILE)}) to at least 1024 and grade again.")
    if exc.errno == errno.EAGAIN:
        return (f"the grader could not start a process ({exc.strerror}): raise the process limit (`ulimit -u`, now "
                f"{soft(resource.RLIMIT_NPROC)}) to at least a few hundred and grade again.")
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM) and exc.filename:
        return (f"the grader cannot write {exc.filename} ({exc.strerror}): set GRADER_CACHE_DIR (the build cache) "
                "or --report-dir to a folder this user can write, and grade again.")
    if exc.filename and in_cache(str(exc.filename)):
        # Anything else the cache's own folder refuses (a file where a folder should be, a folder that
        # cannot hold others, one removed under the grade): the machine's, with the fix.
        return (f"the grader's cache at {cache_root()} could not be used ({exc.strerror}: {exc.filename}): set "
                "GRADER_CACHE_DIR to a folder this user can write (or remove the broken one), and grade again.")
    return None


def in_cache(path: str) -> bool:
    try:
        root = str(cache_root())
    except OSError:
        return False
    return path == root or path.startswith(root.rstrip("/") + "/")


# Address space a grade needs, measured on the emulator: at `ulimit -v 860000` (840 MiB) the timed
# shape's 64 MiB arrays failed, at 1500000 it graded.
GRADE_ADDRESS_SPACE_KIB = 2_000_000


def memory_limit() -> str | None:
    """The memory limit this grader inherited, said with its value and the fix, where one is set
    (`ulimit -v`, RLIMIT_AS; or RLIMIT_DATA, `ulimit -d`); None where memory is unlimited."""
    for which, flag, what in ((resource.RLIMIT_AS, "-v", "address-space"), (resource.RLIMIT_DATA, "-d", "data")):
        value = resource.getrlimit(which)[0]
        if value != resource.RLIM_INFINITY:
            now = value // 1024
            # a figure above the limit set: the measured need where the limit is below it; where it is not,
            # this grade needed more than that measure (a larger exercise), so twice what it had
            need = GRADE_ADDRESS_SPACE_KIB if now < GRADE_ADDRESS_SPACE_KIB else 2 * now
            more = "" if now < GRADE_ADDRESS_SPACE_KIB else ", this one more than the limit gave it"
            return (f"the grader ran out of memory under the {what} limit it inherited (`ulimit {flag}`, now "
                    f"{now} KiB = {value / 2**20:.0f} MiB); a grade needs about {GRADE_ADDRESS_SPACE_KIB} KiB (the "
                    f"timed shape's inputs, the checks' float64 answers, its children){more}: raise it (`ulimit "
                    f"{flag} unlimited`, or at least {need}) and grade again.")
    return None


def cpu_limit_too_short(rubric: Rubric) -> str | None:
    """Where the CPU-time limit this grader inherited (`ulimit -t`; per process, so each child gets it
    too) is shorter than a child's time limit and its start: said with its value and the fix, before
    anything runs (at `ulimit -t 3` the grader itself was killed mid-grade; a child killed by it would
    read as the student's crash)."""
    soft = resource.getrlimit(resource.RLIMIT_CPU)[0]
    need = int(rubric.limits.time_limit_s) + 30
    if soft == resource.RLIM_INFINITY or soft >= need:
        return None
    return (f"the CPU-time limit this grader inherited (`ulimit -t`, now {soft} s a process) is shorter than a grade "
            f"needs ({need} s: the child's time limit, limits.time_limit_s, and its start): raise it (`ulimit -t "
            "unlimited`) and grade again. Nothing was run; no student is graded for this.")


def no_room(exc: OSError) -> str:
    """What to do when the grader cannot write its own files: a file-size limit, a full disk."""
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    why = (f"the file-size limit this grader inherited ({limit} bytes: `ulimit -f`)" if exc.errno == errno.EFBIG
           else "the disk (or its quota)")
    return (f"the grader could not write {exc.filename or 'its data'}: {why} is too small for what it writes "
            "(the timed shape's inputs are 64 MiB a set). Raise it, or set GRADER_CACHE_DIR to a folder with "
            "room, and grade again.")
