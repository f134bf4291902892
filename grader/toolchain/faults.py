"""Whether the machine, not the code, failed a build: the compilers' temporary folder checked
before a build (check_scratch_folder), and after a failed one the tools' own words about the
machine (machine_fault), the disk (disk_fault), and, where neither says, a file known to build
compiled the same way (known_good_fault). Each is said with its fix; the student is never blamed
for the machine.
"""

from __future__ import annotations

import errno
import os
import re
import resource
import tempfile
import time
from pathlib import Path

from grader.core.errors import InfrastructureError
from grader.toolchain.flags import SHIM_HEADER
from grader.toolchain.running import BuildLimits, build_room, run_limited, scratch_folder

_SCRATCH_PROBE = 1 << 20       # nvcc's temporary files for one build: a few MiB; a folder without 1 MiB fails it


def check_scratch_folder() -> None:
    """InfrastructureError naming the folder and the fix where the compilers' temporary folder
    cannot take a file of _SCRATCH_PROBE bytes (missing, read-only, full, over quota): checked
    before a build, so that such a machine never reads as a student's compile error."""
    folder = scratch_folder()
    probe = folder / f".grader-probe-{os.getpid()}-{time.monotonic_ns()}"
    try:
        with open(probe, "wb") as f:
            f.write(b"\0" * _SCRATCH_PROBE)
    except OSError as exc:
        if exc.errno == errno.EFBIG:
            limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
            raise InfrastructureError(
                f"the file-size limit this grader inherited (`ulimit -f`, now {limit // 1024} KiB) is smaller than the "
                "files a build and a grade write (the timed shape's inputs are 64 MiB): raise it (`ulimit -f "
                "unlimited`) and grade again. Nothing was compiled; no student is graded for this.") from None
        raise InfrastructureError(
            f"the compilers' temporary folder {folder} cannot take a 1 MiB file ({exc.strerror or exc}): "
            f"{'set TMPDIR to' if os.environ.get('TMPDIR') else 'free space in /tmp or set TMPDIR to'} a writable "
            "folder with free space, and grade again. Nothing was compiled; no student is graded for this.") from None
    finally:
        try:
            probe.unlink()
        except OSError:
            pass


# What a compiler prints when the machine, not the code, failed it: the temporary folder, the
# disk, the process and file limits. Matched on a failed build's log; the student is never blamed.
_MACHINE_FAULTS = (
    (r"Could not open output file '?([^'\s]*tmpxft[^'\s]*)", "nvcc could not write its temporary file {0}: set TMPDIR to "
     "a writable folder with free space"),
    (r"Failed to preprocess host compiler properties", "nvcc could not run the host compiler to read its properties "
     "(usually a full or read-only temporary folder, $TMPDIR or /tmp): set TMPDIR to a writable folder with free space"),
    (r"[Cc]annot create temporary file in ([^:]+): ([^\n]+)", "the compiler could not create a temporary file in {0} "
     "({1}): set TMPDIR to a writable folder with free space"),
    (r"No space left on device|Disk quota exceeded", "the disk is full (or over its quota) where the compiler writes: "
     "free space, or set TMPDIR and GRADER_CACHE_DIR to a disk with room"),
    (r"Read-only file system", "the compiler was asked to write on a read-only file system: set TMPDIR and "
     "GRADER_CACHE_DIR to writable folders"),
    (r"Too many open files", "the compiler ran out of file descriptors: raise the open-files limit (`ulimit -n`, "
     "now {nofile}) to at least 1024"),
    (r"Killed signal terminated program (\S+)|'(\S+)' died due to signal 9", "the compiler ({0}{1}) was killed from "
     "outside the build (the out-of-memory killer, a job's memory limit or an administrator): the machine ran short of "
     "memory; grade with fewer grades at once (`--jobs`) or give the job more memory"),
    (r"[Cc]ould not fork|[Cc]annot fork|Resource temporarily unavailable", "the compiler could not start its "
     "processes: raise the process limit (`ulimit -u`, now {nproc}) to at least a few hundred"),
)


def machine_fault(log: str) -> str | None:
    """What of a failed build's log says the machine failed it (see _MACHINE_FAULTS), said with the
    fix; None where the code failed it."""

    def limit(which: int) -> str:
        soft, _ = resource.getrlimit(which)
        return "unlimited" if soft == resource.RLIM_INFINITY else str(soft)

    # Only the tools' own lines: a diagnostic about a source file (file(12): ..., file:12:5: ...) and
    # the source lines echoed under it can carry any text the student wrote (#error Too many ...).
    own = "\n".join(ln for ln in log.splitlines()
                    if ln and not ln[0].isspace() and not re.match(r"\S+(\(\d+\)|:\d+(:\d+)?):", ln))
    for pattern, text in _MACHINE_FAULTS:
        m = re.search(pattern, own)
        if m:
            return text.format(*(g or "" for g in m.groups()), nofile=limit(resource.RLIMIT_NOFILE),
                               nproc=limit(resource.RLIMIT_NPROC))
    return None


_OUT_OF_DISK = r"No space left on device|Disk quota exceeded|Read-only file system"
DISK_FLOOR_MIB = 32          # less free than this where a build writes, after it failed: the disk failed it


def disk_fault(log: str, directory: Path) -> str | None:
    """A failed build that the disk failed, decided from the machine where its words are not the
    tools' own lines (machine_fault skips every diagnostic line, and nvcc says a full TMPDIR as one:
    `.../sm_32_intrinsics.h(403): catastrophic error: error while writing generated C++ file: No space
    left on device`): a catastrophic error of that kind in a file outside the build's folder (no
    student's file: their copy is inside it), or less than DISK_FLOOR_MIB free in TMPDIR or the
    build's folder now. None where the disk is fine."""
    for m in re.finditer(rf"^(/[^\n(]+)\(\d+\): catastrophic error: [^\n]*({_OUT_OF_DISK})", log, re.M):
        if not Path(m.group(1)).is_relative_to(directory):
            return (f"the compiler could not write its files ({m.group(2)}): free space in "
                    f"{tempfile.gettempdir()} or point TMPDIR (and GRADER_CACHE_DIR) at a larger disk")
    for folder in (Path(tempfile.gettempdir()), directory):
        try:
            st = os.statvfs(folder)
        except OSError:
            continue
        free_mib = st.f_bavail * st.f_frsize / 2**20
        if free_mib < DISK_FLOOR_MIB:
            return (f"{folder} has {free_mib:.1f} MiB free (a build needs about {DISK_FLOOR_MIB} MiB for the "
                    "compiler's files): free space there, or point TMPDIR (and GRADER_CACHE_DIR) at a larger disk")
    return None


KNOWN_GOOD = "__global__ void grader_known_good(float* x) { x[threadIdx.x] = 1.0f; }\n"
_KNOWN_GOOD_FOR_S = 120.0        # a known-good build's success stands this long (a batch of compile errors pays once)
_known_good: dict[tuple, float] = {}


def known_good_fault(compiler: str, flags: list[str], link_flags: list[str], limits: BuildLimits) -> str | None:
    """After a build failed and no rule named the machine: the same compiler, flags, link flags,
    limits and TMPDIR on a file known to build, compiled and linked. Where that fails too, the machine failed the build (a broken
    toolchain, a limit, the disk), said with what it printed; None where it builds (the code failed).
    A success is kept for _KNOWN_GOOD_FOR_S seconds in this process."""
    key = (compiler, tuple(flags), tuple(link_flags), str(scratch_folder()), limits)
    if time.monotonic() - _known_good.get(key, -1e9) < _KNOWN_GOOD_FOR_S:
        return None
    try:
        # in a room behind the same wall: a wall that kept the compiler from its own files fails this too
        with build_room(read=(str(SHIM_HEADER.parent),)) as room:
            (room.path / "known_good.cu").write_text(KNOWN_GOOD)
            ran = run_limited([compiler, *flags, "-c", "-o", "known_good.o", "known_good.cu"], limits, room)
            if ran.proc.returncode == 0 and not ran.over:
                ran = run_limited([compiler, "-shared", *link_flags, "-o", "known_good.so", "known_good.o"], limits,
                                  room)
    except InfrastructureError as exc:
        return str(exc)
    except OSError as exc:
        return f"{compiler} could not be run ({exc.strerror or exc})"
    proc, over = ran.proc, ran.over
    if proc.returncode == 0 and not over:
        _known_good[key] = time.monotonic()
        return None
    lines = (over or (proc.stdout + proc.stderr)).strip().splitlines()
    said = [ln.strip() for ln in lines if "error" in ln.lower()][-2:] or lines[-1:]
    return (f"a file known to build fails here too with the same compiler and flags ({Path(compiler).name}: "
            f"{' / '.join(said) or 'no output'}): the toolchain, a limit or the disk of this machine, not the "
            "code. Check the compiler runs (`" + Path(compiler).name + " --version`), the limits (`ulimit -a`) and "
            "the free space of TMPDIR")
