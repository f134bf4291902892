"""The file-system wall (Linux's Landlock), one for every process that touches a submission.

Each step names what it may reach as a `Rules` (folders and files to read, folders to read and
write, device files), and the wall lets it open nothing else: not the class folder, not a report
folder, not the grader's cache, not a home folder, not another process's files in /proc. Landlock
checks the file reached, not the name used, so a link, a relative path, `/proc/self/cwd` or a
path spliced together by a preprocessor reaches nothing more.

Two steps use it:
- every build (toolchain/running.py): a `Ruleset` made in the grader before the compiler starts,
  and applied between fork and exec (`Ruleset.restrict`, two system calls), so that ninja and
  every compiler, assembler and linker it starts inherit it;
- every child that runs submission code (run/child/fswall.py: `confine`), applied in the child
  itself once the grader's own files are loaded.

What every step may reach (`base_rules`):
- read-only: the system's folders (`SYSTEM_FOLDERS`; of /etc only what the tools need, `ETC_FOR_TOOLS`,
  where the step runs as the grader's own user: `system_folders`) and every entry of /proc that is
  not a process (/proc/meminfo, /proc/sys, /proc/driver, ...); a child also its own /proc/<pid>, and /sys;
- read and write, one file each: the device files every program may use (`/dev/null`, `/dev/zero`,
  `/dev/full`, `/dev/random`, `/dev/urandom`), and in a child on a GPU the GPU's (its backend's
  `device_files`: `/dev/nvidia*` for CUDA);
  never a folder of /dev, where a TMPDIR of /dev/shm would put other grades' files.

A build (and the child on the CPU emulator) also gets a view of its own (`View`): a private mount
namespace whose root holds only what its rules name, bound at the same paths, so that a path
outside them does not exist for it at all (Landlock alone answers EACCES for a file that exists and
ENOENT for one that does not, which would tell a `__has_include` which classmates have handed in),
mounted beside the step's own folder, never inside it; and a PID namespace of its own, with a
fresh /proc that shows its own processes alone (whose entries Landlock's rules, made for the
grader's /proc, leave closed to a build). Where no mount namespace can be made (not root, and no
user namespaces), the build runs behind Landlock alone and says so; where no PID namespace can be,
the grader's /proc is bound and Landlock keeps every process's entries closed.

Only the standard library here: the child imports this module before its wall goes up.
"""

from __future__ import annotations

import ctypes
import os
import stat
import time
from dataclasses import dataclass, field

# Linux's generic system call numbers (the same on x86-64 and arm64, since 5.13).
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# Access rights (include/uapi/linux/landlock.h), by the ABI that brought them.
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_ABI1_ALL = (1 << 13) - 1                    # execute .. make_sym
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
READ = EXECUTE | READ_FILE | READ_DIR
DEVICE = WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV

SYSTEM_FOLDERS = ("/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin", "/etc")
# Of /etc, what compilers, the loader and the interpreter read, where what touches a submission runs
# as the grader's own user (drops_to_another_user): the rest of /etc may hold that user's own private
# files (a TLS key kept 0600 under /etc, as docs/serve.md's example once did), which a build's
# `.include` or a launcher's open() would then print into a report.
ETC_FOR_TOOLS = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/ld.so.preload", "/etc/alternatives",
                 "/etc/localtime", "/etc/timezone", "/etc/passwd", "/etc/group", "/etc/nsswitch.conf",
                 "/etc/locale.alias", "/etc/host.conf", "/etc/gai.conf")
DEVICE_FILES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")


@dataclass(frozen=True)
class Rules:
    """What one step may open: read (folders and files, with execute), write (folders: every
    right beneath them), devices (device files: read, write, ioctl)."""

    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()

    def plus(self, *, read: tuple[str, ...] = (), write: tuple[str, ...] = (),
             devices: tuple[str, ...] = ()) -> "Rules":
        """These rules and more, each path once (a path beneath a folder already listed is left out)."""
        def merged(old: tuple[str, ...], new: tuple[str, ...], within: tuple[str, ...]) -> tuple[str, ...]:
            out = list(old)
            for p in new:
                if p and not under(p, [*out, *within]):
                    out.append(p)
            return tuple(out)

        w = merged(self.write, write, ())
        return Rules(read=merged(self.read, read, w), write=w, devices=merged(self.devices, devices, ()))


@dataclass
class Confinement:
    """What the wall did in a process (claimed by the child, like all it reports)."""

    confined: bool
    detail: str
    ms: float = 0.0
    readable: list[str] = field(default_factory=list)     # the folders and files left readable
    writable: list[str] = field(default_factory=list)
    # Threads that existed before the wall and are not walled (Landlock walls the calling thread and
    # the threads it starts): in a child that runs submission code, none.
    threads_outside: int = 0


def under(path: str, roots) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


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


_LIBC: ctypes.CDLL | None = None


def libc() -> ctypes.CDLL:
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None, use_errno=True)
        _LIBC.syscall.restype = ctypes.c_long
    return _LIBC


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 where there is none (an old kernel, or not enabled)."""
    abi = libc().syscall(ctypes.c_long(_CREATE_RULESET), None, ctypes.c_size_t(0),
                         ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return int(abi) if abi > 0 else 0


def why_no_landlock() -> str:
    """Why this kernel offers no Landlock, said for an administrator ("" where it does)."""
    if landlock_abi() > 0:
        return ""
    err = ctypes.get_errno()
    return {38: "this kernel has no Landlock (Linux 5.13 or later with CONFIG_SECURITY_LANDLOCK)",
            95: "Landlock is built into this kernel but not enabled (add landlock to the lsm= boot option)"}.get(
        err, f"Landlock unavailable ({os.strerror(err) if err else 'unknown'})")


def proc_entries(own_pid: int | None = None) -> list[str]:
    """The entries of /proc a step may read: every one that is not a process (nor a link to one:
    /proc/self, /proc/thread-self, /proc/mounts, /proc/net lead to the reader's own, which a build's
    compilers do not need and a child is given as own_pid); and /proc/<own_pid>."""
    found = []
    try:
        with os.scandir("/proc") as entries:
            for e in entries:
                if e.name.isdigit() or e.is_symlink():
                    continue
                found.append(e.path)
    except OSError:
        return []
    if own_pid is not None:
        found.append(f"/proc/{own_pid}")
    return sorted(found)


def device_files(gpu: tuple[str, ...] = ()) -> list[str]:
    """The device files a step may open: DEVICE_FILES, and the character devices whose paths begin
    with one of gpu (a backend's device_files: "/dev/nvidia" gives /dev/nvidia0, /dev/nvidiactl,
    /dev/nvidia-uvm, and those in /dev/nvidia-caps/)."""
    found = [p for p in DEVICE_FILES if _is_char_device(p)]
    if gpu:
        for prefix in gpu:
            folder, stem = os.path.split(prefix)
            try:
                names = sorted(os.listdir(folder))
            except OSError:
                continue
            for name in names:
                if not name.startswith(stem):
                    continue
                path = os.path.join(folder, name)
                if _is_char_device(path):
                    found.append(path)
                elif os.path.isdir(path) and not os.path.islink(path):
                    found += [os.path.join(path, n) for n in sorted(os.listdir(path))
                              if _is_char_device(os.path.join(path, n))]
    return found


def _is_char_device(path: str) -> bool:
    try:
        return stat.S_ISCHR(os.stat(path, follow_symlinks=False).st_mode)
    except OSError:
        return False


# The user this process started as: the grader's, or in a child the one it started as (a child drops
# from root to nobody later, run/child/walls.py, after importing this module).
_STARTED_AS = os.geteuid()


def drops_to_another_user() -> bool:
    """Whether the builds and the children run as a user of their own (nobody), not the grader's: where
    the grader runs as root. Otherwise they read what the grader's own user may, and of /etc only
    ETC_FOR_TOOLS (system_folders); result.json's sandbox and the first screen say so."""
    return _STARTED_AS == 0


def system_folders() -> list[str]:
    """The system's folders a walled step may read (SYSTEM_FOLDERS), /etc whole only where it runs as
    a user of its own (drops_to_another_user), else of /etc only ETC_FOR_TOOLS."""
    etc = () if drops_to_another_user() else ("/etc",)
    return [p for p in SYSTEM_FOLDERS if p not in etc and os.path.exists(p)] + \
        ([p for p in ETC_FOR_TOOLS if os.path.lexists(p)] if etc else [])


def etc_view() -> str:
    """What of /etc the builds and the children may read, in result.json's words (sandbox.etc)."""
    if drops_to_another_user():
        return "all of /etc, as nobody (the grader runs as root)"
    return ("of /etc only what compilers and the loader need: the builds and the children run as the grader's own "
            f"user (uid {_STARTED_AS}), not root, and read what it may elsewhere")


def base_rules(*, gpu: tuple[str, ...] = (), own_pid: int | None = None, sys_folder: bool = False) -> Rules:
    """What every walled step may reach (the module's docstring); a child adds its own pid and /sys."""
    read = system_folders() + proc_entries(own_pid)
    if sys_folder and os.path.isdir("/sys"):
        read.append("/sys")
    return Rules(read=tuple(read), devices=tuple(device_files(gpu)))


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_PINNED: dict[str, int] = {}


def _pinned_path(path: str) -> int:
    """path opened (O_PATH) once a process and held: its rule's inode stays the one the path names
    (see Ruleset), and a batch's many builds at once hold one descriptor a path, not one a build
    (each build's sixty made descriptor numbers pass 1024, where select() fails)."""
    fd = _PINNED.get(path)
    if fd is None:
        fd = _PINNED[path] = os.open(path, os.O_PATH | os.O_CLOEXEC)
    return fd


class Ruleset:
    """A Landlock ruleset made from Rules, not yet applied: `restrict` applies it to the calling
    process (and every process it then starts). It holds the descriptors of the paths it names
    open while it lives: a rule is bound to an inode, and /proc makes a new inode for an entry
    whose cached name was dropped, so an entry must stay pinned for its rule to keep matching."""

    def __init__(self, rules: Rules):
        self.rules = rules
        self.fd = -1
        self.problem = ""
        self.abi = landlock_abi()
        self._pinned: list[int] = []
        self._prctl = libc().prctl
        self._syscall = libc().syscall
        if self.abi <= 0:
            self.problem = why_no_landlock()
            return
        handled = every_right(self.abi)
        attr = ctypes.c_uint64(handled)
        fd = self._syscall(ctypes.c_long(_CREATE_RULESET), ctypes.byref(attr), ctypes.c_size_t(8), ctypes.c_uint32(0))
        if fd < 0:
            self.problem = f"the Landlock ruleset could not be made ({os.strerror(ctypes.get_errno())})"
            return
        self.fd = int(fd)
        wanted = [(p, READ, True) for p in rules.read] + [(p, handled, False) for p in rules.write] + \
            [(p, DEVICE & handled, True) for p in rules.devices]
        for path, rights, pin in wanted:
            self.problem = self._add(path, rights, pin)
            if self.problem:
                self.close()
                return

    def _add(self, path: str, rights: int, pin: bool) -> str:
        """One rule: rights beneath path (a file takes only a file's rights). A path that is not
        there is skipped; any other failure is returned, said. A path read (never written) is
        opened once a process and kept (_pinned_path); one written, a build's room, only while the
        ruleset lives."""
        try:
            fd = _pinned_path(path) if pin else -1
            if fd < 0:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
                self._pinned.append(fd)
        except OSError:
            return ""
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            rights &= FILE_RIGHTS
        rule = _PathBeneath(rights, fd)
        if self._syscall(ctypes.c_long(_ADD_RULE), ctypes.c_int(self.fd), ctypes.c_int(_RULE_PATH_BENEATH),
                         ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
            return f"a Landlock rule for {path} was refused ({os.strerror(ctypes.get_errno())})"
        return ""

    @property
    def ready(self) -> bool:
        return self.fd >= 0 and not self.problem

    def restrict(self) -> int:
        """Apply the ruleset to the calling thread and all it starts: no_new_privs, then
        landlock_restrict_self. Only system calls through functions resolved beforehand, so it may
        run between fork and exec. 0, or the errno of the call that failed."""
        if self._prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return ctypes.get_errno() or 1
        if self._syscall(ctypes.c_long(_RESTRICT_SELF), ctypes.c_int(self.fd), ctypes.c_uint32(0)) != 0:
            return ctypes.get_errno() or 1
        return 0

    def close(self, keep_pinned: bool = False) -> None:
        """Let go of the ruleset's descriptor (and, unless keep_pinned, the paths' descriptors: a
        process walled for the rest of its life keeps them, so that its /proc rules keep matching)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if not keep_pinned:
            for fd in self._pinned:
                try:
                    os.close(fd)
                except OSError:
                    pass
            self._pinned = []

    def __enter__(self) -> "Ruleset":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def confine(rules: Rules) -> Confinement:
    """Apply the wall to this process (every thread it starts from now on). Never raises: where the
    kernel offers no Landlock, or a step fails, the Confinement says why and nothing is restricted."""
    start = time.perf_counter()
    try:
        ruleset = Ruleset(rules)
        if not ruleset.ready:
            return Confinement(False, f"reads not confined: {ruleset.problem}", ms=_ms(start))
        failed = ruleset.restrict()
        ruleset.close(keep_pinned=True)
        if failed:
            return Confinement(False, f"reads not confined: the wall could not be applied ({os.strerror(failed)})",
                               ms=_ms(start))
        return Confinement(True, f"Landlock ABI {ruleset.abi}", ms=_ms(start), readable=list(rules.read),
                           writable=list(rules.write))
    except Exception as exc:  # noqa: BLE001 - a grade goes on, and says its reads were not confined
        return Confinement(False, f"reads not confined: {type(exc).__name__}: {exc}", ms=_ms(start))


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 3)
