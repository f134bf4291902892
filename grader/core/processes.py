"""Every process group the grader starts (builds, grading children), so that none outlives it.

Each is started in a process group of its own (setsid) and, through PR_SET_PDEATHSIG, is sent a
signal when the grader dies, even by SIGKILL: a grading child SIGKILL (it holds nothing worth
saving), ninja SIGTERM (it then ends the compilers it started, in their own groups). An
interruption the grader survives (SIGINT, SIGTERM) ends them all through end_all().

Only os and ctypes calls in set_death_signal(): it runs between fork and exec.
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import time

PR_SET_PDEATHSIG = 1
PR_GET_DUMPABLE, PR_SET_DUMPABLE = 3, 4
try:
    _PRCTL = ctypes.CDLL(None, use_errno=True).prctl      # resolved here: no dlsym between fork and exec
except (OSError, AttributeError):
    _PRCTL = None

_live: dict[int, object] = {}             # pgid -> its Popen (a build's, which ends by SIGTERM) or None
_lock = threading.Lock()
_closed = False                            # after end_all(): a group started late is ended at once


def age_s() -> float | None:
    """Seconds since this process started (the kernel's start time, in clock ticks since boot:
    10 ms steps), None where /proc cannot say: what a command spent before a step, its interpreter
    and imports included."""
    try:
        with open("/proc/self/stat") as f:
            after_name = f.read().rsplit(")", 1)[1].split()
        started = int(after_name[19]) / os.sysconf("SC_CLK_TCK")       # field 22, starttime
        return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - started)
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def close_to_children() -> bool:
    """Make this process undumpable (PR_SET_DUMPABLE 0): its /proc files (mem, maps, fd, environ)
    then belong to root, so a child running as the same user (a GPU grade's recorder runs the
    student's host code) cannot read this process's memory or find the run's private folder in its
    maps. Children start dumpable again (exec resets it); only this process is closed. Returns
    whether it is closed (False where prctl is missing)."""
    if _PRCTL is None:
        return False
    _PRCTL(PR_SET_DUMPABLE, 0, 0, 0, 0)
    return _PRCTL(PR_GET_DUMPABLE, 0, 0, 0, 0) == 0


def set_death_signal(sig: int) -> None:
    """In a child, before exec: be sent sig when the parent dies (Linux; elsewhere nothing)."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)


def started(pgid: int, build=None) -> None:
    """A process group the grader started; build: a build's ninja (its Popen), ended by SIGTERM
    first so that it ends the compilers in their own groups."""
    with _lock:
        _live[pgid] = build
        late = _closed
    if late:
        end_all()


def reopen() -> None:
    """Start anew after end_all() (a batch begins)."""
    global _closed
    with _lock:
        _closed = False


def ended(pgid: int) -> None:
    with _lock:
        _live.pop(pgid, None)


def end_all() -> int:
    """End every live process group the grader started (builds: SIGTERM to ninja, which ends its
    compilers; then SIGKILL to each group); how many there were."""
    global _closed
    with _lock:
        groups = dict(_live)
        _live.clear()
        _closed = True
    for pgid, build in groups.items():
        if build is not None:
            try:
                os.kill(pgid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
    for pgid, build in groups.items():
        if build is not None:
            try:
                build.wait(timeout=5)
            except Exception:  # noqa: BLE001 - it is killed below either way
                pass
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return len(groups)


def group_cpu_seconds(pgid: int) -> float | None:
    """The CPU seconds (user and system) a process group has used: each live member's own and its
    ended children's, read from /proc; None where /proc cannot be read."""
    return _cpu_seconds(2, pgid)


def session_cpu_seconds(sid: int) -> float | None:
    """The CPU seconds of every process in a session (a build's: ninja puts each compiler in a
    process group of its own, but in ninja's session), ended children's included; None where none
    is found in /proc."""
    return _cpu_seconds(3, sid)


def _cpu_seconds(field: int, value: int) -> float | None:
    """The CPU of every process whose stat field (after the command: 2 its process group, 3 its
    session) is value: utime, stime and its reaped children's."""
    ticks = os.sysconf("SC_CLK_TCK")
    total, seen = 0, False
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
            if int(fields[field]) == value:
                total += sum(int(v) for v in fields[11:15])     # utime stime cutime cstime
                seen = True
        except (OSError, IndexError, ValueError):
            continue
    return total / ticks if seen else None


def tasks_of_user(uid: int) -> int:
    """The processes and threads a user runs now (what RLIMIT_NPROC counts), read from /proc."""
    count = 0
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 0
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid == uid:
                count += len(os.listdir(f"/proc/{entry}/task"))
        except OSError:
            continue
    return count


def in_session(sid: int) -> list[tuple[int, str, str]]:
    """(pid, command name, state) of every process in a session (a build's: each compiler ninja
    starts is in a process group of its own, in ninja's session)."""
    return in_groups({sid}, field=3)


def in_groups(groups: set[int], field: int = 2) -> list[tuple[int, str, str]]:
    """(pid, command name, state) of every process in one of the process groups (field 3: the
    sessions), read from /proc: the one scan of it (a batch's leftovers, a build's compiler stage)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                head, _, tail = f.read().rpartition(")")
            fields = tail.split()
            if int(fields[field]) in groups:
                found.append((int(entry), head.split("(", 1)[1], fields[0]))
        except (OSError, IndexError, ValueError):
            continue
    return found
