"""What the parent reads of a running child: its result channel, the guard's reports, its
stdout and stderr, until all are closed or the deadline passes (ChildStreams.collect), the output streams
kept as their head and tail (CappedOutput). sandbox.Worker runs it.

Imports only run/.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import time
from dataclasses import dataclass
from typing import Callable

from grader.run import protocol
from grader.run.child.guard import forged_report


class CappedOutput:
    """Keeps the first and last `cap // 2` bytes of a stream and counts the rest."""

    def __init__(self, cap: int):
        self.half = max(cap // 2, 1)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.half - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > self.half:
                del self.tail[: len(self.tail) - self.half]

    @property
    def dropped(self) -> int:
        return self.total - len(self.head) - len(self.tail)

    def text(self) -> str:
        body = self.head.decode("utf-8", "replace")
        if self.dropped:
            body += f"\n[... {self.dropped} bytes dropped ...]\n"
        return body + self.tail.decode("utf-8", "replace")


@dataclass
class Collected:
    """What Worker._collect read of a child, and how the reading ended."""

    results: bytearray                 # the result channel's bytes
    reports: bytearray                 # the guard's reports
    timed_out: bool = False            # the deadline passed first
    forged: bool = False               # bytes no grader wrote, on the result channel or the guard's pipe
    left_early: bool = False           # the done frame was in: the child is left to exit (leave_when_done)


@dataclass
class ChildStreams:
    """What the parent reads of one child (sandbox.Worker's): its process, the result channel's and
    the guard's pipes, and its stdout and stderr kept as their head and tail."""

    proc: subprocess.Popen
    result_fd: int
    guard_fd: int
    out: CappedOutput
    err: CappedOutput

    def collect(self, *, deadline: float, on_sent: Callable[[], None] | None, check: protocol.StreamCheck,
                done: Callable[[bytearray], bool] | None = None) -> Collected:
        """Read the result channel, the guard's reports, stdout and stderr until all four are closed
        (the child has exited) or the deadline passes: what was read, and how it ended.

        Stopping rule: every stream at its end, the deadline, or bytes no grader wrote on the result
        channel (a forged frame: check) or the guard's pipe (forged_report); after those the child
        is killed at once, and the verdict says the grader's descriptors were written to. Where
        done is given, also the result channel's end once done(results) says its last frame is the
        done frame: what the other streams hold by then is read, and collecting ends (left early).
        select wakes at least every 0.5 s."""
        results, reports = bytearray(), bytearray()
        sel = selectors.DefaultSelector()
        sel.register(self.result_fd, selectors.EVENT_READ, results)
        sel.register(self.guard_fd, selectors.EVENT_READ, reports)
        sel.register(self.proc.stdout, selectors.EVENT_READ, self.out)
        sel.register(self.proc.stderr, selectors.EVENT_READ, self.err)
        timed_out = False
        open_streams = 4
        try:
            while open_streams:
                remaining = deadline - time.perf_counter()
                if remaining <= 0:
                    timed_out = True
                    break
                for key, _ in sel.select(timeout=min(remaining, 0.5)):
                    chunk = _read(key)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        open_streams -= 1
                        if key.data is results and on_sent is not None:
                            on_sent()
                        if key.data is results and done is not None and done(results):
                            _drain(sel, reports)
                            return Collected(results, reports, forged=forged_report(reports), left_early=True)
                        continue
                    if key.data is results:
                        results += chunk
                        if check.feed(results):
                            return Collected(results, reports, forged=True)
                    elif key.data is reports:
                        if len(reports) < 1 << 16:
                            reports += chunk
                            if forged_report(reports):
                                return Collected(results, reports, forged=True)
                    else:
                        key.data.feed(chunk)
        finally:
            sel.close()
        return Collected(results, reports, timed_out=timed_out)


def _read(key: selectors.SelectorKey) -> bytes:
    """What one of a child's streams holds now (b"" at its end)."""
    return os.read(key.fd if isinstance(key.fileobj, int) else key.fileobj.fileno(), 1 << 20)


def _drain(sel: selectors.BaseSelector, reports: bytearray) -> None:
    """Read what the streams still registered (the guard's reports, stdout, stderr: the result
    channel has ended) hold now, without waiting for their end."""
    while ready := sel.select(timeout=0):
        for key, _ in ready:
            chunk = _read(key)
            if not chunk:
                sel.unregister(key.fileobj)
            elif key.data is reports:
                if len(reports) < 1 << 16:
                    reports += chunk
            else:
                key.data.feed(chunk)
