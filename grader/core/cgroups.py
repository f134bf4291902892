"""A control group of its own for each process the grader starts on a submission (a build, a
grading child), where the machine lets the grader make one: its memory counted whole (private,
shared, a memfd, /dev/shm: every page the group touches), its processes and threads bounded
(pids), its CPU time read whole (every compiler of a build, whatever its process group), and
anything left in it ended when it is removed.

cgroup v2 (one tree: memory.max, pids.max, cpu.stat) where the grader's own group delegates the
memory and pids controllers to its children; else cgroup v1 (a hierarchy per controller: memory,
pids, cpuacct), where root may make a group beneath its own in each. Where neither is writable
make() returns None and the caller falls back to resource limits (core/limits.py), saying so.

Group.attach_self() runs between fork and exec (os calls only); so does nothing else here. The
child's own side (OwnMemory) is opened before its file-system wall goes up and written when its
limits are set (run/child/walls.py).
"""

from __future__ import annotations

import functools
import itertools
import os
import signal
import time
from dataclasses import dataclass, field

PREFIX = "grader-"         # a group the grader made: a child finds its own by this (OwnMemory)
_V1 = ("memory", "pids", "cpuacct")
_count = itertools.count()


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, type, options) of every cgroup file system."""
    found = []
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 4 and parts[2] in ("cgroup", "cgroup2"):
                    found.append((parts[1], parts[2], set(parts[3].split(","))))
    except OSError:
        pass
    return found


def _own_paths() -> dict[str, str]:
    """This process's group in each hierarchy: controller -> path ('' for the v2 tree)."""
    out: dict[str, str] = {}
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, names, path = line.rstrip("\n").split(":", 2)
                for name in (names.split(",") if names else [""]):
                    out[name] = path
    except (OSError, ValueError):
        pass
    return out


def _write(path: str, value: str) -> bool:
    try:
        with open(path, "w") as f:
            f.write(value)
        return True
    except OSError:
        return False


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


STALE_S = 3600.0           # a group older than this whose grader's pid is gone is a leftover


def _sweep(folder: str) -> None:
    """The groups a grader that was killed left beneath folder (named after its pid, which is gone,
    and made over STALE_S ago: a grader in another pid namespace sharing the hierarchy may have just
    made one it has not joined yet), removed where empty (their processes died with it)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        pid = name[len(PREFIX):].split("-")[-2:-1]
        if name.startswith(PREFIX) and pid and pid[0].isdigit() and not os.path.exists(f"/proc/{pid[0]}"):
            path = os.path.join(folder, name)
            try:
                if time.time() - os.stat(path).st_mtime > STALE_S:
                    os.rmdir(path)
            except OSError:
                pass


@functools.cache
def _v2_parent() -> str | None:
    """The folder beneath which this process may make v2 groups with memory and pids, or None."""
    own = _own_paths().get("")
    mount = next((m for m, kind, _ in _mounts() if kind == "cgroup2"), None)
    if own is None or mount is None:
        return None
    parent = mount + own.rstrip("/")
    try:
        with open(os.path.join(parent, "cgroup.controllers")) as f:
            controllers = set(f.read().split())
        with open(os.path.join(parent, "cgroup.subtree_control")) as f:
            enabled = set(f.read().split())
    except OSError:
        return None
    wanted = {"memory", "pids"}
    if not wanted <= controllers:
        return None
    if not wanted <= enabled and not _write(os.path.join(parent, "cgroup.subtree_control"), "+memory +pids"):
        return None          # a group with processes in it cannot enable its children's controllers (EBUSY)
    _sweep(parent)
    return parent


@functools.cache
def _v1_parents() -> dict[str, str]:
    """controller -> the folder of this process's v1 group for it, where that is writable."""
    own = _own_paths()
    out = {}
    for controller in _V1:
        mount = next((m for m, kind, opts in _mounts() if kind == "cgroup" and controller in opts), None)
        if mount is None or controller not in own:
            continue
        folder = mount + own[controller].rstrip("/")
        if os.access(folder, os.W_OK):
            out[controller] = folder
            _sweep(folder)
    return out


@dataclass
class Group:
    """One process's group: version ('cgroup v2' or 'cgroup v1'), its folder for each controller
    (memory, pids, cpu), and the limits written."""

    version: str
    folders: dict[str, str]
    memory_bytes: int | None = None
    pids: int | None = None
    _procs: list[str] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        self._procs = [os.path.join(f, "cgroup.procs") for f in dict.fromkeys(self.folders.values())]

    @property
    def procs(self) -> tuple[str, ...]:
        """Its cgroup.procs files, one a hierarchy: a process joins by writing 0 to each (attach_self,
        or the launcher: core/view.Entry)."""
        return tuple(self._procs)

    def attach_self(self) -> None:
        """Between fork and exec: this process into the group (writing 0 moves the writer)."""
        for path in self._procs:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)

    def describe(self) -> str:
        held = []
        if self.memory_bytes is not None:
            held.append(f"memory {self.memory_bytes >> 20} MiB")
        if self.pids is not None:
            held.append(f"{self.pids} processes and threads")
        return f"{self.version} ({', '.join(held)})" if held else ""

    def set_memory(self, nbytes: int) -> bool:
        """The group's memory limit (swap included where the machine has any)."""
        folder = self.folders.get("memory")
        if folder is None:
            return False
        if self.version == "cgroup v2":
            ok = _write(os.path.join(folder, "memory.max"), str(nbytes))
            _write(os.path.join(folder, "memory.swap.max"), "0")
        else:
            ok = _set_v1_memory(folder, nbytes)
        if ok:
            self.memory_bytes = nbytes
        return ok

    def memory_bytes_used(self) -> int | None:
        folder = self.folders.get("memory")
        if folder is None:
            return None
        return _read_int(os.path.join(folder, "memory.current" if self.version == "cgroup v2" else "memory.usage_in_bytes"))

    def memory_peak_bytes(self) -> int | None:
        folder = self.folders.get("memory")
        if folder is None:
            return None
        return _read_int(os.path.join(folder, "memory.peak" if self.version == "cgroup v2" else "memory.max_usage_in_bytes"))

    def memory_kills(self) -> int:
        """How many of its processes the kernel killed at its memory limit."""
        folder = self.folders.get("memory")
        if folder is None:
            return 0
        name = "memory.events" if self.version == "cgroup v2" else "memory.oom_control"
        try:
            with open(os.path.join(folder, name)) as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def pids_refused(self) -> int:
        """How many forks and thread starts pids.max refused."""
        folder = self.folders.get("pids")
        if folder is None:
            return 0
        try:
            with open(os.path.join(folder, "pids.events")) as f:
                return sum(int(v) for k, _, v in (ln.partition(" ") for ln in f) if k == "max")
        except (OSError, ValueError):
            return 0

    def cpu_seconds(self) -> float | None:
        """The CPU time (user and system) of every process that ran in the group, ended ones too."""
        folder = self.folders.get("cpu")
        if folder is None:
            return None
        if self.version == "cgroup v2":
            try:
                with open(os.path.join(folder, "cpu.stat")) as f:
                    for line in f:
                        if line.startswith("usage_usec "):
                            return int(line.split()[1]) / 1e6
            except (OSError, ValueError):
                return None
            return None
        ns = _read_int(os.path.join(folder, "cpuacct.usage"))
        return None if ns is None else ns / 1e9

    def remove(self) -> None:
        """End whatever is left in the group (a process that left its process group too), then
        remove it."""
        for folder in dict.fromkeys(self.folders.values()):
            for _ in range(50):
                try:
                    with open(os.path.join(folder, "cgroup.procs")) as f:
                        pids = [int(p) for p in f.read().split()]
                except (OSError, ValueError):
                    pids = []
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
                try:
                    os.rmdir(folder)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)        # a killed process leaves its group when it is reaped


def _set_v1_memory(folder: str, nbytes: int) -> bool:
    """memory.limit_in_bytes, and memory.memsw.limit_in_bytes (memory and swap) where there is one:
    memsw may never be below the memory limit, so the order depends on the direction."""
    mem = os.path.join(folder, "memory.limit_in_bytes")
    memsw = os.path.join(folder, "memory.memsw.limit_in_bytes")
    if not os.path.exists(memsw):
        return _write(mem, str(nbytes))
    if _write(mem, str(nbytes)):
        _write(memsw, str(nbytes))
        return True
    return _write(memsw, str(nbytes)) and _write(mem, str(nbytes))


def available() -> str | None:
    """The kind of group make() would make here ('cgroup v2', 'cgroup v1'), or None: none."""
    if _v2_parent() is not None:
        return "cgroup v2"
    parents = _v1_parents()
    return "cgroup v1" if "memory" in parents and "pids" in parents else None


def make(*, memory_bytes: int | None, pids: int, what: str = "") -> Group | None:
    """A new group beneath the grader's own, its limits written (memory_bytes None: no memory limit
    yet, the memory still counted), or None where none can be made here. what: a word in its name."""
    name = f"{PREFIX}{what}{'-' if what else ''}{os.getpid()}-{next(_count)}"
    parent = _v2_parent()
    if parent is not None:
        folder = os.path.join(parent, name)
        try:
            os.mkdir(folder)
        except OSError:
            return None
        group = Group("cgroup v2", {"memory": folder, "pids": folder, "cpu": folder})
        if not _write(os.path.join(folder, "pids.max"), str(pids)):
            group.remove()
            return None
        group.pids = pids
        if memory_bytes is not None and not group.set_memory(memory_bytes):
            group.remove()
            return None
        return group
    parents = _v1_parents()
    if "memory" not in parents or "pids" not in parents:
        return None
    made: dict[str, str] = {}
    for controller, folder in parents.items():
        try:
            os.mkdir(os.path.join(folder, name))
            made["cpu" if controller == "cpuacct" else controller] = os.path.join(folder, name)
        except OSError:
            continue
    group = Group("cgroup v1", made)
    if "memory" not in made or "pids" not in made or not _write(os.path.join(made["pids"], "pids.max"), str(pids)):
        group.remove()
        return None
    group.pids = pids
    if memory_bytes is not None and not group.set_memory(memory_bytes):
        group.remove()
        return None
    return group


class OwnMemory:
    """In a child: the memory limit of the group the grader made for it (None from find() where it
    is in none), its files opened before the child's wall goes up, written once it knows its base."""

    def __init__(self, version: str, limit_fds: list[int], usage_fd: int):
        self.version, self._limits, self._usage = version, limit_fds, usage_fd
        self.holding = False            # its limit set (limit()): every page of the child counted, a memfd's too

    @classmethod
    def find(cls) -> OwnMemory | None:
        own = _own_paths()
        v1 = own.get("memory", "")
        if os.path.basename(v1.rstrip("/")).startswith(PREFIX):
            mount = next((m for m, kind, opts in _mounts() if kind == "cgroup" and "memory" in opts), None)
            names, usage, version = ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes"), "memory.usage_in_bytes", "cgroup v1"
            path = v1
        elif os.path.basename(own.get("", "").rstrip("/")).startswith(PREFIX):
            mount = next((m for m, kind, _ in _mounts() if kind == "cgroup2"), None)
            names, usage, version = ("memory.max",), "memory.current", "cgroup v2"
            path = own[""]
        else:
            return None
        if mount is None:
            return None
        folder = mount + path.rstrip("/")
        try:
            usage_fd = os.open(os.path.join(folder, usage), os.O_RDONLY)
        except OSError:
            return None
        fds = []
        for name in names:
            try:
                fds.append(os.open(os.path.join(folder, name), os.O_WRONLY))
            except OSError:
                if not fds:
                    os.close(usage_fd)
                    return None
        return cls(version, fds, usage_fd)

    def used(self) -> int:
        return int(os.pread(self._usage, 64, 0).split()[0])

    def limit(self, nbytes: int) -> bool:
        """Its group's memory limit (memory first, then memory and swap; or the other way where the
        first is refused, memsw never below memory)."""
        value = str(nbytes).encode()
        fds = self._limits
        for order in (fds, fds[::-1]):
            try:
                for fd in order:
                    os.pwrite(fd, value, 0)
                self.holding = True
                return True
            except OSError:
                continue
        return False

    def close(self) -> None:
        for fd in (*self._limits, self._usage):
            try:
                os.close(fd)
            except OSError:
                pass
