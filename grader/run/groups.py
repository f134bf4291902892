"""The process groups the grader's children run in: killing one, waiting for the children left to
be reaped in the background, and finding any process of them still alive once a run is over
(core.processes reads /proc for it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time

from grader.core import processes

STARTED_GROUPS: set[int] = set()
_COLLECTING = threading.local()        # the groups the current thread's grade started (collecting())


def started(pid: int) -> None:
    """Note a Worker's process group (its child's pid): for the leftover checks, and for the
    grade this thread is running where it collects its own (collecting())."""
    STARTED_GROUPS.add(pid)
    mine = getattr(_COLLECTING, "groups", None)
    if mine is not None:
        mine.add(pid)


@contextlib.contextmanager
def collecting():
    """The process groups this thread starts inside the block (a set, filled as they start): one
    grade's, while other grades run in other threads (`grader samples --jobs`)."""
    mine: set[int] = set()
    _COLLECTING.groups = mine
    try:
        yield mine
    finally:
        _COLLECTING.groups = None


def forget_if_empty(pgid: int, wait_s: float = 1.0) -> None:
    """A Worker's group once it is killed and reaped: forgotten when nothing of it is left (waiting
    at most wait_s for killed members to go), kept for the leftover checks otherwise. Its number is
    free again once empty: a long run wraps the kernel's process numbers (32,768 here), and another
    process's group with that number is no leftover of ours (a suite on two workers saw three)."""
    deadline = time.monotonic() + wait_s
    while any(state != "Z" for _, _, state in processes.in_groups({pgid})):
        if time.monotonic() > deadline:
            return
        time.sleep(0.01)
    STARTED_GROUPS.discard(pgid)


def leftover_processes(among: set[int] | None = None) -> list[int]:
    """Live processes in any process group a Worker of this process started (the child and
    anything it spawned), or in those among names; there should be none once its run is over
    (the children left when done are waited for first: they are being reaped)."""
    settle()
    return [pid for pid, _, state in processes.in_groups(set(STARTED_GROUPS if among is None else among))
            if state != "Z"]


_REAPERS: list[threading.Thread] = []       # the threads reaping children left when done


def keep_reaper(reaper: threading.Thread) -> None:
    """Note a thread reaping a child left when done (settle waits for it)."""
    _REAPERS[:] = [r for r in _REAPERS if r.is_alive()] + [reaper]


def settle(timeout_s: float = 10.0) -> None:
    """Wait (at most timeout_s) for the children left when done to be reaped."""
    deadline = time.monotonic() + timeout_s
    for reaper in list(_REAPERS):
        reaper.join(max(0.0, deadline - time.monotonic()))
        if not reaper.is_alive():
            with contextlib.suppress(ValueError):
                _REAPERS.remove(reaper)


def peak_rss_kib(pid: int) -> int:
    """A live child's peak resident memory (VmHWM), 0 where it cannot be read."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
