"""A step's own root and its own process numbers: the view every build and the CPU emulator's child
runs in (core/fswall.py is the other half of the file-system wall, Landlock).

`View` is planned in the grader from the step's Rules: a private mount namespace whose root (a
small tmpfs on an empty folder beside the step's own folder, never inside it) holds only what the
rules name, bound at the same paths, so that a path outside them does not exist for the step; and
a PID namespace whose fresh /proc shows the step's own processes alone. `Entry` is what happens to
a step between its start and its command: a session, a control group, limits, the view, a user, the
wall. A small C launcher (core/view.c, built once into the cache by toolchain/hostlibs.build_launcher)
does it all and execs the command: the grader starts it without a Python fork (subprocess's vfork),
so that no fork copies the grader's memory (three did, 10 ms of the contract's cost).
`View.said` reads, in the grader, what the entry said.

Only the standard library and core/ here: the child imports this module before its wall goes up.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from grader.core.fswall import Rules, under

_FAILED = "\x01"              # the launcher's mark before why a step could not go on (view.c: fail)


class View:
    """A root of the step's own: an empty folder (root, made beforehand, beside the step's own
    folder) on which, in a private mount namespace, a small tmpfs holds each path of rules bound at
    its own path (a link, such as /lib -> usr/lib, made again as the same link), then chroot into it;
    and (own_pids) a PID namespace of its own, whose /proc shows its own processes and nothing of
    others (the grader's, the server's, another build's: their command lines and environments).

    Entered by the launcher (core/view.c), before the privileges are dropped (as root), or in a
    user namespace of its own (not root); its plan (what to bind, what to link: argv) is made here.

    With own_pids the launcher stays outside the namespace: it waits for the namespace's first
    process and ends as the step's process ends. That first process (pid 1) starts the step's
    process (which lays out the view with a fresh /proc and execs the step's command: ninja, a
    compiler, the child), and reaps every process the step orphans until that one ends, then ends,
    which ends every process left in the namespace. It runs nothing of the step's, is not dumpable
    and not behind the step's Landlock wall, so no process of the step may read its memory,
    environment or files in /proc (Landlock forbids a walled process to trace one outside its
    domain)."""

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
        self.write = tuple(rules.write)

    def argv(self) -> list[str]:
        """The view as the launcher's plan (view.c: -V, -P, -i, -l, -b)."""
        out = ["-V", self.root, self.cwd] + (["-P"] if self.own_pids else [])
        if os.geteuid() != 0:
            out += ["-i", str(os.geteuid()), str(os.getegid())]
        for path, target in self.links:
            out += ["-l", path, target]
        for path, is_dir in self.binds:    # the room (written) bound alone, not with what is mounted beneath it
            out += ["-b", path, str(int(is_dir)), "0" if path in self.write else "1"]
        return out

    @staticmethod
    def said(text: str) -> tuple[str, str]:
        """What the launcher said of the view, read in the grader: (the root, the process numbers),
        in result.json's words."""
        text = text.split(_FAILED, 1)[0]
        if "\t" not in text:
            why = text or "it did not say"
            return f"no root of its own ({why})", f"no PID namespace ({why})"
        root, pids = text.split("\t", 1)
        return ("its own root" if not root else f"no root of its own ({root})",
                "its own PID namespace" if not pids else pids)

    @staticmethod
    def failed(text: str) -> str:
        """Why the launcher could not go on to the step's command (it then exits 126), or ""."""
        return text.split(_FAILED, 1)[1] if _FAILED in text else ""


@dataclass(frozen=True)
class Entry:
    """What is done to a step between its start and its command by the launcher (core/view.c, built
    by toolchain/hostlibs.build_launcher: its path), in this order: its own session, its control
    groups joined (their cgroup.procs files), a lower priority, resource limits ((kind, soft, hard),
    clamped in the grader: limits.clamp), no network, its view (what it said written to said_to),
    another user (uid, gid), the death signal, the limits that must wait for the view (late_limits),
    the Landlock ruleset (its descriptor). `command` is the launcher's command line for it and `fds`
    the descriptors it must be handed (subprocess's pass_fds)."""

    launcher: str
    groups: tuple[str, ...] = ()
    nice: int = 0
    limits: tuple[tuple[int, int, int], ...] = ()
    no_network: bool = False
    view: View | None = None
    said_to: int | None = None
    user: tuple[int, int] | None = None
    death_signal: int = 0
    late_limits: tuple[tuple[int, int, int], ...] = ()
    ruleset_fd: int = -1

    def command(self, args: list[str]) -> list[str]:
        out = [self.launcher, "-s"]
        for path in self.groups:
            out += ["-c", path]
        if self.nice:
            out += ["-n", str(self.nice)]
        for flag, limits in (("-r", self.limits), ("-R", self.late_limits)):
            for kind, soft, hard in limits:
                out += [flag, str(kind), str(soft & _UNLIMITED), str(hard & _UNLIMITED)]
        out += ["-N"] if self.no_network else []
        out += ["-k", str(int(self.death_signal))] if self.death_signal else []
        if self.view is not None:
            out += self.view.argv()
        if self.said_to is not None:
            out += ["-o", str(self.said_to)]
        if self.user is not None:
            out += ["-u", str(self.user[0]), str(self.user[1])]
        if self.ruleset_fd >= 0:
            out += ["-L", str(self.ruleset_fd)]
        return [*out, "--", *args]

    @property
    def fds(self) -> tuple[int, ...]:
        return tuple(fd for fd in (self.said_to, self.ruleset_fd) if fd is not None and fd >= 0)


_UNLIMITED = (1 << 64) - 1      # RLIM_INFINITY (-1 in Python's resource) as the C library's rlim_t
