"""A step's own root and its own process numbers: the view every build and the CPU emulator's child
runs in (core/fswall.py is the other half of the file-system wall, Landlock).

`View` is planned in the grader from the step's Rules and entered between fork and exec: a private
mount namespace whose root (a small tmpfs on an empty folder beside the step's own folder, never
inside it) holds only what the rules name, bound at the same paths, so that a path outside them
does not exist for the step; and a PID namespace whose fresh /proc shows the step's own processes
alone. `View.said` reads, in the grader, what the entry said.

Only the standard library and core/fswall.py here: the child imports this module before its wall
goes up.
"""

from __future__ import annotations

import ctypes
import os

from grader.core.fswall import Rules, libc, under

# mount(2) and unshare(2) flags (include/uapi/linux/mount.h, sched.h)
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_BIND, _MS_REC, _MS_PRIVATE = 2, 4, 8, 4096, 16384, 1 << 18
_CLONE_NEWNS, _CLONE_NEWUSER, _CLONE_NEWPID = 0x00020000, 0x10000000, 0x20000000
_PR_SET_DUMPABLE, _PR_SET_PDEATHSIG = 4, 1
_FDS = 1 << 20          # closerange's end: every descriptor (the kernel's close_range)
# The signals the namespace's first process takes from the grader as their default (it ends, and the
# namespace with it); from inside the namespace the kernel delivers none it has no handler for.
_FIRST_DEFAULTS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM")


class View:
    """A root of the step's own: an empty folder (root, made beforehand, beside the step's own
    folder) on which, in a private mount namespace, a small tmpfs holds each path of rules bound at
    its own path (a link, such as /lib -> usr/lib, made again as the same link), then chroot into it;
    and (own_pids) a PID namespace of its own, whose /proc shows its own processes and nothing of
    others (the grader's, the server's, another build's: their command lines and environments).

    `enter` runs between fork and exec, before the privileges are dropped (as root), or in a user
    namespace of its own (not root): only os calls and functions resolved beforehand. Its plan (what
    to bind, what to link) is made in the grader.

    With own_pids the process that calls `enter` stays outside the namespace: it waits for the
    namespace's first process and ends as it ends, never returning. That first process (pid 1)
    lays out the view with a fresh /proc, starts the process that returns from `enter` (and goes on
    to exec the step's command: ninja, a compiler, the child), and reaps every process the step
    orphans until that one ends, then ends, which ends every process left in the namespace. It
    runs nothing of the step's, is not dumpable and not behind the step's Landlock wall, so no
    process of the step may read its memory, environment or files in /proc (Landlock forbids a
    walled process to trace one outside its domain)."""

    def __init__(self, rules: Rules, root: str, cwd: str, *, own_pids: bool = True):
        self.root, self.cwd, self.own_pids = root, cwd, own_pids
        self.links: list[tuple[str, str]] = []          # (path, its link's target)
        self.binds: list[tuple[str, bool]] = []         # (path, is a folder)
        seen: list[str] = []
        # /proc whole (its non-process entries are what Landlock lets be read), before its entries
        for path in ("/proc", *rules.read, *rules.write, *rules.devices):
            if not path or under(path, seen) or not os.path.lexists(path):
                continue
            seen.append(path)
            if os.path.islink(path):
                self.links.append((path, os.readlink(path)))
            else:
                self.binds.append((path, os.path.isdir(path)))
        self.binds.sort(key=lambda b: b[0].count("/"))   # a folder before what is bound beneath it
        lib = libc()
        self._mount, self._unshare, self._chroot, self._prctl = lib.mount, lib.unshare, lib.chroot, lib.prctl
        self._mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
        # the room (written) bound alone, not with what is mounted beneath it
        self.encoded = [(os.fsencode(p), os.fsencode(root + p), d, 0 if p in rules.write else _MS_REC)
                        for p, d in self.binds]
        self._proc_at = os.fsencode(root + "/proc")
        self.proc_bound = ""                              # why no /proc of its own was mounted (in the step)
        import signal                                     # resolved here, not between fork and exec
        self._defaults = [int(getattr(signal, name)) for name in _FIRST_DEFAULTS if hasattr(signal, name)]
        self._signal = lib.signal                         # the C library's: no Python handler runs outside
        self._signal.restype = ctypes.c_void_p
        self._signal.argtypes = [ctypes.c_int, ctypes.c_void_p]

    def enter(self, uid: int, gid: int) -> str:
        """Into the view (and its PID namespace): what it said, for `said` to read in the grader. The
        caller goes on behind Landlock alone where the view failed, and with the grader's process
        numbers hidden by Landlock alone where the PID namespace did."""
        pids = ""
        if self.own_pids:
            pids = self._unshared(uid, gid, _CLONE_NEWPID)
            if pids:
                pids = f"no PID namespace ({pids})"
        if not self.own_pids or pids:
            problem = self._unshared(uid, gid, 0)
            if problem:
                return f"{problem}\t{pids or 'not tried'}"
        else:
            self._first_process()            # returns in the namespace's second process only
        laid = self._lay_out(fresh_proc=self.own_pids and not pids)
        if self.own_pids and not pids and self.proc_bound:
            pids = f"its own PID namespace, the grader's /proc bound ({self.proc_bound})"
        return f"{laid}\t{pids}"

    def _unshared(self, uid: int, gid: int, more: int) -> str:
        """A mount namespace (and the more namespaces asked for) of this process's own; as an ordinary
        user in a user namespace of its own too, mapping uid and gid to themselves. "" when done."""
        if os.geteuid() != 0:
            if self._unshare(_CLONE_NEWUSER | _CLONE_NEWNS | more) != 0:
                return f"no user namespace ({os.strerror(ctypes.get_errno())})"
            try:
                with open("/proc/self/setgroups", "w") as f:
                    f.write("deny")
                with open("/proc/self/uid_map", "w") as f:
                    f.write(f"{uid} {uid} 1")
                with open("/proc/self/gid_map", "w") as f:
                    f.write(f"{gid} {gid} 1")
            except OSError as exc:
                return f"the user namespace's map ({exc.strerror})"
        elif self._unshare(_CLONE_NEWNS | more) != 0:
            return f"no mount namespace ({os.strerror(ctypes.get_errno())})"
        return ""

    def _first_process(self) -> None:
        """This process stays outside the new PID namespace: it starts the namespace's first process,
        waits for it and ends as the step's process ended (killed by the same signal: a child the
        seccomp filter killed is told by its SIGSYS), which pid 1 writes to it. That one (pid 1)
        starts the step's process, which returns from here (and lays out the view), reaps every
        orphan until the step's process ends, and ends so."""
        for sig in self._defaults:            # the grader's handlers never run in either (SIG_DFL)
            self._signal(sig, None)
        self._prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
        self._prctl(_PR_SET_PDEATHSIG, 9, 0, 0, 0)    # SIGKILL when the grader ends: then pid 1, then all
        told, tell = os.pipe()
        first = os.fork()
        if first:
            _close_all_but(told)              # holding nothing of the step's (its output, its channels)
            _end_as(_waited(first, told))
        try:
            self._prctl(_PR_SET_PDEATHSIG, 9, 0, 0, 0)
            step = os.fork()
        except BaseException:  # noqa: BLE001 - nothing may return into the caller's exec from here
            os._exit(126)
        if step == 0:
            os.close(told)
            os.close(tell)
            return
        status = 126 << 8
        try:
            _close_all_but(tell)
            while True:                       # every orphan of the step's is reaped here, until it ends
                try:
                    pid, got = os.waitpid(-1, 0)
                except ChildProcessError:
                    break
                if pid == step:
                    status = got
                    break
            os.write(tell, status.to_bytes(4, "little"))
        except BaseException:  # noqa: BLE001
            pass
        os._exit(0)

    def _lay_out(self, *, fresh_proc: bool) -> str:
        """The view's root laid out and entered (chroot); fresh_proc: a /proc of this PID namespace's
        own mounted there instead of the grader's bound. "" when done, else what failed."""
        if self._mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
            return f"/ could not be made private ({os.strerror(ctypes.get_errno())})"
        if self._mount(b"tmpfs", os.fsencode(self.root), b"tmpfs", _MS_NOSUID | _MS_NODEV, b"mode=755,size=1m") != 0:
            return f"no tmpfs for the view ({os.strerror(ctypes.get_errno())})"
        try:
            for path, target in self.links:
                os.makedirs(os.path.dirname(self.root + path), exist_ok=True)
                os.symlink(target, self.root + path)
            for (path, at, is_dir, rec), (shown, _) in zip(self.encoded, self.binds):
                if is_dir:
                    os.makedirs(at, exist_ok=True)
                else:
                    os.makedirs(os.path.dirname(at), exist_ok=True)
                    os.close(os.open(at, os.O_CREAT | os.O_WRONLY, 0o644))
                if at == self._proc_at and fresh_proc:
                    if self._mount(b"proc", at, b"proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None) == 0:
                        continue
                    self.proc_bound = os.strerror(ctypes.get_errno())  # where the machine forbids it
                    fresh_proc = False
                if self._mount(path, at, None, _MS_BIND | rec, None) != 0:
                    return f"{shown} could not be bound ({os.strerror(ctypes.get_errno())})"
        except OSError as exc:
            return f"the view could not be laid out ({exc})"
        if self._chroot(os.fsencode(self.root)) != 0:
            return f"chroot ({os.strerror(ctypes.get_errno())})"
        os.chdir(self.cwd)
        return ""

    @staticmethod
    def said(text: str) -> tuple[str, str]:
        """What `enter` said, read in the grader: (the root, the process numbers), in result.json's words."""
        if "\t" not in text:
            why = text or "it did not say"
            return f"no root of its own ({why})", f"no PID namespace ({why})"
        root, pids = text.split("\t", 1)
        return ("its own root" if not root else f"no root of its own ({root})",
                "its own PID namespace" if not pids else pids)


def _close_all_but(fd: int) -> None:
    os.closerange(0, fd)
    os.closerange(fd + 1, _FDS)


def _waited(pid: int, told: int) -> int:
    """The wait status of the step's process, as pid 1 (pid) wrote it to told once it ended; 126 as an
    exit code where it wrote none."""
    try:
        while True:
            try:
                os.waitpid(pid, 0)
                break
            except InterruptedError:
                continue
        said = os.read(told, 4)
        return int.from_bytes(said, "little") if len(said) == 4 else 126 << 8
    except BaseException:  # noqa: BLE001 - nothing may return into the caller's exec from here
        return 126 << 8


def _end_as(status: int) -> None:
    """End this process as a wait status says its step ended: the same exit code, or killed by the
    same signal (without a core file: this process is a copy of the grader's memory)."""
    try:
        if os.WIFSIGNALED(status):
            import resource                # imported already: the grader's limits module does
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            libc().signal(os.WTERMSIG(status), None)      # resolved by View (its restype and argtypes)
            os.kill(os.getpid(), os.WTERMSIG(status))
            os._exit(128 + os.WTERMSIG(status))
        os._exit(os.waitstatus_to_exitcode(status))
    except BaseException:  # noqa: BLE001
        os._exit(126)
