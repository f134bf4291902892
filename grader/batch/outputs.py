"""What a batch writes beside the students' reports: summary.csv, gradebook.csv, junit.xml and
each student's Gradescope results.json."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

from grader.analysis.similarity import Similarity
from grader.batch.grading import Graded
from grader.core import atomic
from grader.core.backend import BACKENDS, named
from grader.core.outcomes import Outcome
from grader.exercises.rubric import Rubric
from grader.platforms import gradescope, junit
from grader.platforms.delivery import GRADESCOPE_FILE
from grader.platforms.scoring import max_points, score
from grader.report.files import render_markdown

SUMMARY_COLUMNS = ("student", "file", "status", "correct", "tier", "borderline", "fraction", "fraction_low",
                   "fraction_high", "gbps", "diagnosis", "flags", "message", "backend", "gpu", "seconds", "reused",
                   "identical_to", "similar_to")
GRADEBOOK_COLUMNS = ("student", "points", "max_points", "tier", "tier_note", "status", "identical_to")


def identical_text(g: Graded) -> str:
    """"identical to alice/kernel.cu; bob.cu": the classmates who handed in the same bytes."""
    return "identical to " + "; ".join(g.entry.identical_to) if g.entry.identical_to else ""


def _bool(value: bool | None) -> str:
    return "" if value is None else ("true" if value else "false")


def incorrect_text(r) -> str:
    """An incorrect grade's message for the class's table (its own is empty): the first failing check
    and its first wrong element, or why it failed."""
    if r.status != Outcome.GRADED or r.correct is not False:
        return ""
    failed = next((c for c in r.cases if c.passed is False), None)
    if failed is None:
        return "incorrect"
    m = failed.first_mismatch
    if m:
        return (f"{failed.name}: first bad element {m['at']}: got {m['got']:.9g}, want {m['want']:.9g}; "
                f"{failed.bad} of {failed.total} wrong")
    return f"{failed.name}: {failed.note or 'failed'}"


def summary_row(g: Graded) -> dict:
    r = g.result
    if r is None:                      # no submission found for this student
        return {"student": g.entry.student, "file": "", "status": g.entry.problem, "correct": "", "tier": "",
                "borderline": "", "fraction": "", "fraction_low": "", "fraction_high": "", "gbps": "",
                "diagnosis": "", "flags": "", "message": g.entry.detail, "backend": "", "gpu": "", "seconds": "",
                "reused": "", "identical_to": ""}
    ci = r.fraction_ci or [None, None]
    return {
        "student": g.entry.student, "file": str(g.entry.path.name if g.entry.path else ""), "status": r.status,
        "correct": _bool(r.correct), "tier": r.tier or "", "borderline": _bool(r.borderline),
        "fraction": f"{r.fraction:.4f}" if r.fraction is not None else "",
        "fraction_low": f"{ci[0]:.4f}" if ci[0] is not None else "",
        "fraction_high": f"{ci[1]:.4f}" if ci[1] is not None else "",
        "gbps": f"{r.gbps:.1f}" if r.gbps is not None else "",
        "diagnosis": " ".join(d.code for d in r.diagnosis), "flags": " ".join(r.flags),
        "message": r.message or incorrect_text(r), "backend": r.backend,
        "gpu": r.device.name if r.backend in BACKENDS and BACKENDS[r.backend].on_gpu else "",
        "seconds": f"{r.seconds:.1f}", "reused": _bool(g.reused), "identical_to": identical_text(g),
    }


LINES_JOINED = " / "        # what stands between a multi-line message's lines in a CSV cell


def one_line(value: str) -> str:
    """A cell's text on one line: its lines stripped and joined with " / ", the empty ones and a
    compiler's caret or underline (nothing but ^ and ~, after a gutter's |: pointing into the line
    above) left out."""
    if "\n" not in value and "\r" not in value:
        return value
    lines = (line.strip() for line in value.splitlines())
    return LINES_JOINED.join(line for line in lines if line and line.strip("^~| "))


# What a spreadsheet reads as the start of a formula (=HYPERLINK(...), +cmd, -2+3, @SUM, and a tab or
# carriage return before one): a cell starting so is written after a ' (OWASP's advice), which every
# spreadsheet shows as text and drops from the shown value. Numbers (-0.5) are left as they are.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


_NUMBER = re.compile(r"[+-]?\d+(\.\d+)?([eE][+-]?\d+)?")


def inert(value: str) -> str:
    """A CSV cell's text as no spreadsheet will run it (FORMULA_STARTS); read_cell undoes it."""
    if not value.startswith(FORMULA_STARTS) or _NUMBER.fullmatch(value):
        return value
    return "'" + value


def read_cell(value: str) -> str:
    """A cell of a CSV the grader wrote, as it was before inert."""
    return value[1:] if value.startswith("'") and value[1:].startswith(FORMULA_STARTS) else value


def csv_text(columns: tuple[str, ...], rows: list[dict]) -> str:
    """rows as CSV, every cell one line (one_line) and inert: a spreadsheet's row, a grep's match, a
    line of `column -s, -t` each hold one row; a student's file named =HYPERLINK(...).cu is text. Every
    CSV the grader writes is written here."""
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: inert(one_line(v)) if isinstance(v, str) else v for k, v in row.items()} for row in rows)
    return text.getvalue()


def _write_csv(path: Path, columns: tuple[str, ...], rows: list[dict]) -> None:
    atomic.replace_text(path, csv_text(columns, rows))


def write_summary(graded: list[Graded], path: Path, *, similarity: Similarity | None = None) -> None:
    """One row per student: the outcome, the full message (a refusal's every line, joined on one
    line), where it ran, and the student's closest match at or above the similarity threshold
    ("bob (0.93)"; empty without similarity)."""
    rows = [summary_row(g) for g in graded]
    for row in rows:
        row["similar_to"] = similarity.closest_text(row["student"]) if similarity is not None else ""
    _write_csv(path, SUMMARY_COLUMNS, rows)


def write_gradebook(graded: list[Graded], rubric: Rubric, path: Path) -> None:
    """Points per student by the rubric's `points` section (a missing submission scores 0)."""
    rows = []
    for g in graded:
        if g.result is None:
            rows.append({"student": g.entry.student, "points": "0", "max_points": f"{max_points(rubric):g}", "tier": "",
                         "tier_note": "", "status": g.entry.problem, "identical_to": ""})
            continue
        s = score(g.result, rubric)
        untimed = g.result.tier is None and g.result.correct and not named(g.result.backend).times
        rows.append({"student": g.entry.student, "points": f"{s.total:g}", "max_points": f"{s.maximum:g}",
                     "tier": g.result.tier or "",            # one kind of value: a tier or empty; why not, beside it
                     "tier_note": "not timed (emulator): no tier yet" if untimed and not g.result.tier else "",
                     "status": g.result.status, "identical_to": identical_text(g)})
    _write_csv(path, GRADEBOOK_COLUMNS, rows)


def write_platform_exports(graded: list[Graded], rubric: Rubric, report_dir: Path, *, per_student: bool = True,
                           reports: dict[str, str] | None = None) -> None:
    """junit.xml (one testsuite per graded submission), and with per_student each one's Gradescope
    results.json (report_dir/<student>/gradescope.json), for CI dashboards and an upload per student.
    A batch's own grades wrote theirs as they were delivered (platforms/delivery.py): it passes
    per_student=False; a merge or an export from a store, which deliver nothing, write them here.
    reports: each student's report.md where the caller holds it (the course server's store: the text
    it serves), else rendered here."""
    done = [g for g in graded if g.result is not None]
    suites = [junit.testsuite(g.result, name=g.entry.student) for g in done]
    atomic.replace_bytes(report_dir / "junit.xml", junit.document(suites))
    for g in done if per_student else ():
        markdown = (reports or {}).get(g.entry.student)
        doc = gradescope.results(g.result, score(g.result, rubric),
                                 markdown if markdown is not None else render_markdown(g.result, rubric))
        atomic.replace_text(report_dir / g.entry.student / GRADESCOPE_FILE, json.dumps(doc, indent=1) + "\n")
