"""Results kept as they complete, so an interrupted or repeated batch grades only what changed.

report_dir/results.jsonl holds one line per graded submission: the student, the file, the key
(the submission's bytes, the rubric's text, the backend and the grader's version, hashed) and
the result.json document. A line is appended and flushed the moment a grade is done, so an
interruption loses at most the submission in flight; a later line for a student replaces an
earlier one.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Iterator

from grader import __version__
from grader.core import atomic, jsonlines
from grader.core.errors import UsageError
from grader.core.handin import SourceFile
from grader.core.outcomes import Outcome
from grader.core.results import Result, result_from_json
from grader.exercises.rubric import Rubric

STORE_NAME = "results.jsonl"
LOCK_NAME = ".grader-batch.lock"


class BatchBusy(UsageError):
    """Another batch holds the report folder (its lock names the process)."""


@contextlib.contextmanager
def holding(report_dir: Path, command: str = "grader batch") -> Iterator[None]:
    """One batch at a time per report folder: an exclusive lock on report_dir/.grader-batch.lock
    held for the whole batch (grading and the class's files), released however it ends (the
    kernel drops a dead process's lock, so a killed batch never blocks the next). BatchBusy,
    naming the holder, where another process holds it."""
    report_dir.mkdir(parents=True, exist_ok=True)
    path = report_dir / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = os.pread(fd, 512, 0).decode("utf-8", "replace").strip() or "a process that did not say"
            except OSError:
                holder = "another process"
            raise BatchBusy(f"{report_dir} is being written by another batch ({holder}): wait for it to end, or "
                            "give this one another --report-dir") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{command}, pid {os.getpid()} on {socket.gethostname()}, since "
                      f"{time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


def rubric_bytes(rubric: Rubric) -> bytes | None:
    """The rubric's text as the key takes it (None: a rubric of no file); a batch reads it once."""
    return Path(rubric.path).read_bytes() if rubric.path else None


def grade_key(source: SourceFile, rubric: Rubric | bytes | None, backend: str) -> str:
    """A submission's key: the digest of the bytes read of it (the Entry's source, hashed once when
    it was read; never the path read again), the rubric's text (a Rubric, or its rubric_bytes), the
    backend and the grader's version, hashed."""
    text = rubric_bytes(rubric) if isinstance(rubric, Rubric) else rubric
    h = hashlib.sha256()
    h.update(source.sha256.encode())
    h.update(b"\0" + text if text is not None else b"\0")
    h.update(f"\0{backend}\0{__version__}".encode())
    return h.hexdigest()


class ResultStore:
    """results.jsonl as a sink of a batch's grades: each grade's line appended once, as it ends (add),
    and the file rewritten (compact) only where it holds lines that are no longer current."""

    def __init__(self, path: Path):
        self.path = path
        self._kept: dict[str, tuple[str, Path, Result, str]] = {}     # student: (key, file, result, its line)
        self._lock = threading.Lock()          # a batch's threads add results concurrently
        self._stale = False                    # a line on disk that is not a student's current one
        for row in jsonlines.rows(path):      # a broken line (cut short, not UTF-8): graded again
            try:
                student = str(row["student"])
                kept = (str(row["key"]), Path(row["file"]), result_from_json(row["result"]), json.dumps(row))
            except (ValueError, KeyError, TypeError, AttributeError):
                self._stale = True
                continue
            self._stale = self._stale or student in self._kept
            self._kept[student] = kept

    def reusable(self, student: str, key: str) -> Result | None:
        """The stored result of this student's submission when nothing that decides it changed. An
        infrastructure_error is never reused: it says the machine failed, so it is graded again."""
        kept = self._kept.get(student)
        return kept[2] if kept and kept[0] == key and kept[2].status != Outcome.INFRASTRUCTURE_ERROR else None

    def results(self) -> dict[str, tuple[Path, Result]]:
        """Every student's latest stored result, with its file."""
        return {student: (file, result) for student, (_key, file, result, _line) in self._kept.items()}

    def compact(self) -> None:
        """results.jsonl rewritten with one line a student, the current one, where it holds others (a
        later line for a student replaces an earlier one: after three runs of six students it held 18
        lines, none saying which was current); a file of current lines only is left as it was written.
        Each line as it was written or read (no result serialised again). Atomic: a reader sees the old
        file or the new one."""
        with self._lock:
            if not self._stale:
                return
            atomic.replace_text(self.path, "".join(line + "\n" for _s, (_k, _f, _r, line) in sorted(self._kept.items())))
            self._stale = False

    def add(self, student: str, file: Path, key: str, result: Result, document: dict | None = None) -> None:
        """Append student's grade; document: the result's to_json() where the caller holds it (a batch's
        Rendered.document: one serialisation a grade)."""
        line = json.dumps({"student": student, "file": str(file), "key": key,
                           "result": result.to_json() if document is None else document})
        with self._lock:
            jsonlines.append(self.path, line)
            self._stale = self._stale or student in self._kept
            self._kept[student] = (key, file, result, line)
