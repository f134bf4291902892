"""Results kept as they complete, so an interrupted or repeated batch grades only what changed.

report_dir/results.jsonl holds one line per graded submission: the student, the file, the key
(the submission's bytes, the rubric's text, the backend and the grader's version, hashed) and
the result.json document. A line is appended and flushed the moment a grade is done, so an
interruption loses at most the submission in flight; a later line for a student replaces an
earlier one.
"""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path

from grader import __version__
from grader.core.results import Result, result_from_json
from grader.exercises.rubric import Rubric

STORE_NAME = "results.jsonl"


def grade_key(submission: Path, rubric: Rubric, backend: str) -> str:
    h = hashlib.sha256()
    h.update(submission.read_bytes())
    h.update(b"\0" + Path(rubric.path).read_bytes() if rubric.path else b"\0")
    h.update(f"\0{backend}\0{__version__}".encode())
    return h.hexdigest()


class ResultStore:
    def __init__(self, path: Path):
        self.path = path
        self._kept: dict[str, tuple[str, Path, Result]] = {}     # student: (key, file, result)
        self._lock = threading.Lock()          # a batch's threads add results concurrently
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    row = json.loads(line)
                    self._kept[row["student"]] = (row["key"], Path(row["file"]), result_from_json(row["result"]))
                except (ValueError, KeyError, TypeError):
                    continue           # a line cut short by an interruption: that one is graded again

    def reusable(self, student: str, key: str) -> Result | None:
        """The stored result of this student's submission when nothing that decides it changed. An
        infrastructure_error is never reused: it says the machine failed, so it is graded again."""
        kept = self._kept.get(student)
        return kept[2] if kept and kept[0] == key and kept[2].status != "infrastructure_error" else None

    def results(self) -> dict[str, tuple[Path, Result]]:
        """Every student's latest stored result, with its file."""
        return {student: (file, result) for student, (_key, file, result) in self._kept.items()}

    def add(self, student: str, file: Path, key: str, result: Result) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps({"student": student, "file": str(file), "key": key, "result": result.to_json()})
        with self._lock:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(line + "\n")
                f.flush()
            self._kept[student] = (key, file, result)
