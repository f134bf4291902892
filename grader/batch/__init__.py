"""Grading a class as an instructor does: find each student's submission (inputs), grade them
with resume (grading, store), and write the class's tables (outputs), the class report
(classreport), a sample folder against its manifest (manifest), on Slurm (slurm, merge). It
imports every layer below it (grade, report, platforms and theirs); only the CLI and the course
server (grader/serve) import it."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

from grader.batch.classreport import write_class_report
from grader.batch.grading import BatchOutcome, Graded, class_machine, grade_entries
from grader.batch.inputs import Entry, find_submissions
from grader.batch.merge import merge_reports
from grader.batch.outputs import write_gradebook, write_platform_exports, write_summary
from grader.batch.request import ClassRequest
from grader.batch.similarity import class_similarity
from grader.batch.store import holding
from grader.core.backend import AUTO, Backend

if TYPE_CHECKING:
    from grader.batch.grading import Progress, Said
    from grader.exercises.rubric import Rubric


__all__ = ["BatchOutcome", "Entry", "Graded", "find_submissions", "grade_class", "grade_folder", "merge_reports"]


def grade_folder(directory: Path, *, rubric: "Rubric", backend: str | Backend = AUTO,
                 progress: "Progress | None" = None, **choices) -> "BatchOutcome":
    """grade_class on the ClassRequest these make (choices: ClassRequest's other fields), for a
    script or a test."""
    return grade_class(ClassRequest(directory, rubric, backend, **choices), progress=progress)


def grade_class(request: "ClassRequest", *, progress: "Progress | None" = None,
                entries: "list[Entry] | None" = None, said: "Said | None" = None) -> "BatchOutcome":
    """Grade every student's submission under request.directory, each from the bytes read once when
    the class was listed (batch/inputs.py; entries: the listing the caller already made with
    find_submissions for this request, so the class is listed and read once; None: listed here).
    With a report_dir: each student's reports in report_dir/<student>/, and summary.csv,
    gradebook.csv, junit.xml, results.jsonl, class.html and insights.json beside them, written even
    when the batch is interrupted (with the rows done so far). The class's similar kernels
    (batch/similarity.py) are found once, into outcome.similarity, summary.csv and class.html. The
    backend ("auto" decided once for the class) and the jobs (default_jobs: a few per GPU lane, or
    one per core on the emulator) are resolved here; a shard (K, N) grades only the K-th of N
    deterministic shares of the students, for one class on N machines (`grader merge` combines
    them). said(entry, line): each grade's progress lines as they come (grading.grade_entries)."""
    k, n = request.shard
    if entries is None:
        entries = find_submissions(request.directory, file_name=request.file_name, roster=request.roster)
    entries = entries[k - 1 :: n]
    machine, request = class_machine(request)               # decided once, for the whole class
    report_dir, rubric = request.report_dir, request.rubric
    with holding(report_dir) if report_dir is not None else contextlib.nullcontext():
        outcome = grade_entries(entries, request, machine=machine, progress=progress, said=said)
        if outcome.graded:
            outcome.similarity = class_similarity(outcome.graded, rubric=rubric,
                                                  threshold=request.similarity_threshold,
                                                  given=request.similarity_given)
        if report_dir is not None and outcome.graded:
            write_summary(outcome.graded, report_dir / "summary.csv", similarity=outcome.similarity)
            write_gradebook(outcome.graded, rubric, report_dir / "gradebook.csv")
            write_platform_exports(outcome.graded, rubric, report_dir, per_student=False)
            outcome.insights = write_class_report(outcome.graded, rubric, report_dir / "class.html",
                                                  similarity=outcome.similarity).insights
    return outcome
