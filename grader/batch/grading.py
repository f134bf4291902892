"""Grading a class: every student's submission in turn, each result stored as it completes."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from grader.batch.inputs import Entry
from grader.results import Result
from grader.rubric import Rubric


@dataclass
class Graded:
    entry: Entry
    result: Result | None          # None: no submission to grade (entry.problem says why)
    reused: bool = False           # taken from an earlier run's results.jsonl, unchanged since


@dataclass
class BatchOutcome:
    graded: list[Graded] = field(default_factory=list)
    interrupted: bool = False      # Ctrl-C: the rows so far, the rest not graded
    not_reached: int = 0           # submissions an interruption left ungraded

    @property
    def infrastructure_failures(self) -> list[Graded]:
        return [g for g in self.graded if g.result is not None and g.result.status == "infrastructure_error"]


Progress = Callable[[Graded, int, int], None]     # (the one just done, how many done, how many in all)


def grade_entries(entries: list[Entry], *, rubric: Rubric, backend: str, report_dir: Path | None,
                  progress: Progress | None = None) -> BatchOutcome:
    """Grade each entry (reusing an unchanged stored result); with report_dir, write each one's
    reports into report_dir/<student>/ and keep every result in report_dir/results.jsonl.
    Ctrl-C stops the batch after what was done: the outcome says interrupted."""
    from grader.batch.store import STORE_NAME, ResultStore, grade_key
    from grader.grading import grade_submission
    from grader.report import write_reports

    store = ResultStore(report_dir / STORE_NAME) if report_dir is not None else None
    outcome = BatchOutcome()
    try:
        for entry in entries:
            if entry.path is None or entry.problem:
                done = Graded(entry, None)
            else:
                key = grade_key(entry.path, rubric, backend)
                kept = store.reusable(entry.student, key) if store else None
                if kept is not None:
                    done = Graded(entry, kept, reused=True)
                else:
                    result = grade_submission(entry.path, rubric=rubric, backend=backend)
                    if report_dir is not None:
                        write_reports(result, rubric, report_dir / entry.student)
                    if store is not None:
                        store.add(entry.student, entry.path, key, result)
                    done = Graded(entry, result)
            outcome.graded.append(done)
            if progress:
                progress(done, len(outcome.graded), len(entries))
    except KeyboardInterrupt:
        outcome.interrupted = True
        outcome.not_reached = len(entries) - len(outcome.graded)
    return outcome
