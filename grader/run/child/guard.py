"""The wall around a submission: the seccomp filter of guard.c, and what its reports mean.

The child installs it (install()) after the CUDA context exists and before the
submission's library is loaded; from then on a forbidden system call never runs:
the handler writes one line naming it to the report pipe and ends the process.
The parent reads those lines back into Blocked records (parse_reports) and tells
the student, in their terms, what their code tried.

Both halves live here so that the line format has one owner.
"""

from __future__ import annotations

import ctypes
import os
import time
from dataclasses import dataclass

from grader.core.backend import GPU_DEVICE_FILES

ENFORCE, AUDIT, PROFILE, OFFLINE = 0, 1, 2, 3     # profile: enforce, and what Nsight Compute's injection needs;
# offline: enforce, and no ioctl but a terminal's (the recorder without a GPU: no driver call gets through)
# A flag or'd into an enforcing mode (guard.c's GUARD_NO_MEMFD): memfd_create is refused too, where no control
# group holds the child's memory (run/child/walls.py): RLIMIT_AS, which stands in, counts no memory file
# written and never mapped.
NO_MEMFD = 16

# What a blocked call means, in a student's terms: each names what was stopped (a folder's listing
# is a listing, not a file changed). Calls not named here are "a system call a kernel launch has no
# need of". open and openat (and unlinkat) are told apart by their flags: _open_meaning.
_MEANING = {
    "tried to start a program": {"execve", "execveat"},
    "tried to start another process": {"fork", "vfork", "clone", "clone3"},
    "tried to open a network connection": {"socket", "socketpair", "connect", "bind", "listen", "sendto",
                                           "sendmsg"},
    "tried to create or write a file": {"creat"},
    "tried to delete a file": {"unlink"},
    "tried to delete a folder": {"rmdir"},
    "tried to create a folder": {"mkdir", "mkdirat"},
    "tried to rename or move a file": {"rename", "renameat", "renameat2"},
    "tried to change a file's permissions": {"chmod", "fchmod", "fchmodat"},
    "tried to change a file's owner": {"chown", "fchown", "fchownat", "lchown"},
    "tried to make a hard link to a file": {"link", "linkat"},
    "tried to make a symbolic link": {"symlink", "symlinkat"},
    "tried to create a device file or a named pipe": {"mknod", "mknodat"},
    "tried to change a file's size": {"truncate", "ftruncate", "fallocate"},
    "tried to change a file's timestamps": {"utimensat", "utime", "utimes"},
    "tried to send a signal to another process": {"kill", "tkill", "tgkill", "rt_sigqueueinfo",
                                                  "rt_tgsigqueueinfo", "pidfd_send_signal"},
    "tried to inspect or change another process": {"ptrace", "process_vm_readv", "process_vm_writev",
                                                   "pidfd_open", "pidfd_getfd", "kcmp"},
    "tried to replace the grader's guard": {"rt_sigaction", "seccomp", "prctl"},
    "tried to change its resource limits": {"setrlimit", "prlimit64"},
    # refused only where no control group counts the child's memory (NO_MEMFD)
    ("tried to make a file in memory, which this machine cannot count against your host-memory limit (no control "
     "group holds it here): take host memory with malloc or new, which the limit counts"): {"memfd_create",
                                                                                            "memfd_secret"},
}
_FLAGS_ARG = {"open": 1, "openat": 2}             # where the open flags are (guard.c reports arg0 to arg2)
_AT_REMOVEDIR = 0x200                             # unlinkat's flag: the path is a folder (rmdir)


def _open_meaning(flags: int) -> str:
    """What an open stopped by the filter (guard.c's R_OPEN_FLAGS: a write, a create, a truncation,
    O_TMPFILE, or O_DIRECTORY, which glibc's O_TMPFILE holds: opendir) was for, from its flags. The
    parent reads them with this machine's constants, the child's."""
    if flags & os.O_TMPFILE == os.O_TMPFILE:
        return "tried to create a file (a nameless temporary one)"
    if flags & os.O_CREAT:
        return "tried to create or write a file"
    if flags & os.O_TRUNC:
        return "tried to empty a file"
    if flags & (os.O_WRONLY | os.O_RDWR | os.O_APPEND):
        return "tried to write to a file"
    if flags & os.O_DIRECTORY:
        return "tried to open a folder" if flags & os.O_PATH else "tried to list a folder"
    return "tried to open a file"


@dataclass(frozen=True)
class Blocked:
    """One system call the wall stopped (or, in audit mode, saw)."""

    action: str           # "blocked" or "audit"
    number: int
    name: str
    args: tuple[int, int, int]
    path: str = ""

    @property
    def meaning(self) -> str:
        if self._opens_the_gpu:
            return "asked the GPU's driver for something that needs a new handle on the device"
        if self.name in _FLAGS_ARG:
            return _open_meaning(self.args[_FLAGS_ARG[self.name]])
        if self.name == "unlinkat":
            return "tried to delete a folder" if self.args[2] & _AT_REMOVEDIR else "tried to delete a file"
        for text, names in _MEANING.items():
            if self.name in names:
                return text
        return f"made the system call {self.name}, which a kernel launch has no need of"

    @property
    def _opens_the_gpu(self) -> bool:
        """An open of the driver's device files after the wall: the child's own context is made
        before it, so this is the submission asking for more (a stream or a context of its own)."""
        return self.name in ("open", "openat") and self.path.startswith(GPU_DEVICE_FILES)

    def describe(self) -> str:
        where = f" ({self.path})" if self.path else ""
        said = f"your code {self.meaning}: the system call {self.name}{where} was blocked before it ran"
        if self._opens_the_gpu:
            said += (". That is most often a stream or a context your code created (a stream made on every call): "
                     "launch on the stream the grader gives your launcher, and create none")
        return said


_REPORT_STARTS = (b"blocked ", b"audit ")


def forged_report(data: bytes | bytearray) -> bool:
    """True once the guard's pipe holds a line (complete, or the one still arriving) that no guard
    wrote: every line the guard writes starts "blocked " or "audit ". The parent stops the child
    at that point (a submission writing to the grader's descriptors is rejected whatever it does
    next, and one that then spins would otherwise run to its time limit)."""
    for line in bytes(data).split(b"\n"):
        if line and not any(line.startswith(s) or s.startswith(line) for s in _REPORT_STARTS):
            return True
    return False


def parse_reports(data: bytes) -> list[Blocked]:
    """The guard's report lines; malformed lines (a submission writing to the pipe) are kept as such."""
    found = []
    for raw in data.decode("utf-8", "replace").splitlines():
        parts = raw.split(" ", 6)
        if len(parts) < 6 or parts[0] not in ("blocked", "audit") or not parts[1].lstrip("-").isdigit():
            found.append(Blocked("malformed", -1, "?", (0, 0, 0), raw[:200]))
            continue
        try:
            args = tuple(int(a, 16) for a in parts[3:6])
        except ValueError:
            found.append(Blocked("malformed", -1, "?", (0, 0, 0), raw[:200]))
            continue
        found.append(Blocked(parts[0], int(parts[1]), parts[2], args, parts[6] if len(parts) > 6 else ""))
    return found


@dataclass(frozen=True)
class GuardStatus:
    """Which protections are in force in the child; goes into result.json as `sandbox`."""

    seccomp: bool
    detail: str
    filter_instructions: int = 0
    install_ms: float = 0.0


_STEPS = {1000: "sigaction", 2000: "no_new_privs", 3000: "seccomp", 4000: "thread sync", 5000: "filter length"}
EXIT_CODE = 97          # the child's exit status after a blocked call (GUARD_EXIT_CODE in guard.c)


class Guard:
    """The filter's library, loaded early (while the child may still read anything) and
    installed later, once everything the grader itself needs is loaded."""

    def __init__(self, library: str | None):
        self.lib = None
        self.problem = "no guard library was built" if not library else ""
        if library:
            try:
                self.lib = ctypes.CDLL(library, mode=ctypes.RTLD_LOCAL)
            except OSError as exc:
                self.problem = f"the guard library could not be loaded: {exc}"
                return
            self.lib.grader_guard_install.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long]
            self.lib.grader_guard_install.restype = ctypes.c_int
            self.lib.grader_guard_filter_length.argtypes = [ctypes.c_int]

    def install(self, *, mode: int, report_fd: int) -> GuardStatus:
        """Install the filter on every thread of this process. Never raises: a failure is a GuardStatus."""
        if self.lib is None:
            return GuardStatus(False, self.problem)
        start = time.perf_counter()
        length = self.lib.grader_guard_filter_length(mode)
        code = self.lib.grader_guard_install(mode, report_fd, os.getpid())
        ms = round((time.perf_counter() - start) * 1000, 3)
        if code == 0:
            said = {AUDIT: " (audit mode)", PROFILE: " (profile mode: the profiler's socket and files)",
                    OFFLINE: " (no GPU: no driver call)"}.get(mode & ~NO_MEMFD, "")
            if mode & NO_MEMFD and mode & ~NO_MEMFD != AUDIT:
                said += "; memfd_create refused (no control group counts a memory file here)"
            return GuardStatus(True, "seccomp filter" + said, length, ms)
        step = _STEPS.get(-code // 1000 * 1000, "install")
        err = -code % 1000
        why = os.strerror(err) if step not in ("thread sync", "filter length") and err else f"code {code}"
        return GuardStatus(False, f"seccomp is unavailable here ({step} failed: {why})", length, ms)
