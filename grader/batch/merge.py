"""Combining the report folders of several shards (`grader batch --shard K/N`, on several
machines) into one: summary.csv, gradebook.csv, junit.xml and each student's Gradescope export."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from grader.batch.classreport import write_class_report
from grader.batch.grading import Graded
from grader.batch.inputs import Entry, Problem
from grader.batch.insights import ClassInsights
from grader.batch.outputs import read_cell, write_gradebook, write_platform_exports, write_summary
from grader.batch.store import STORE_NAME, ResultStore
from grader.core.errors import UsageError
from grader.exercises.rubric import Rubric

_PROBLEMS = (Problem.MISSING, Problem.AMBIGUOUS, Problem.UNREADABLE)


def read_shard(folder: Path) -> dict[str, Graded]:
    """Every student of one shard's report folder: results from results.jsonl, students without a
    submission from summary.csv."""
    store = folder / STORE_NAME
    if not store.is_file():
        raise UsageError(f"{folder}: no {STORE_NAME} (is it a `grader batch --report-dir` folder?)")
    found = {student: Graded(Entry(student, file), result)
             for student, (file, result) in ResultStore(store).results().items()}
    summary = folder / "summary.csv"
    if summary.is_file():
        for row in csv.DictReader(summary.open(newline="", encoding="utf-8")):
            row = {k: read_cell(v) if isinstance(v, str) else v for k, v in row.items()}
            if row.get("status") in _PROBLEMS and row.get("student") not in found:
                found[row["student"]] = Graded(Entry(row["student"], None, row["status"], row.get("message", "")), None)
    return found


@dataclass
class Merged:
    """A class merged from its shards: every student's row, and the class's insights (insights.json)."""

    graded: list[Graded]
    insights: ClassInsights


def merge_reports(folders: list[Path], *, out: Path, rubric: Rubric) -> Merged:
    """One class from several shards' folders (a student in two takes the later folder's row);
    writes the combined tables into out."""
    merged: dict[str, Graded] = {}
    for folder in folders:
        merged.update(read_shard(folder))
    graded = [merged[s] for s in sorted(merged)]
    out.mkdir(parents=True, exist_ok=True)
    write_summary(graded, out / "summary.csv")
    write_gradebook(graded, rubric, out / "gradebook.csv")
    write_platform_exports(graded, rubric, out)
    return Merged(graded, write_class_report(graded, rubric, out / "class.html").insights)
