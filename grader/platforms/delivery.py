"""Delivering a finished grade, in one place: the student's attempt kept (report/history.py), the
report files, a --format document, Gradescope's file for the student, the GitHub Actions job summary
and annotations. `grader submit`, a batch's every student and the course server's worker call
deliver(); each document of the grade is rendered once (report/files.Rendered) whoever asks for it.

It writes and returns; it prints nothing: what to say (the change since the last attempt, a report
that could not be written) comes back in Delivered for the caller to say in its own words."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from grader.core import atomic
from grader.core.outcomes import Outcome
from grader.core.results import Result
from grader.core.typed import doc_field
from grader.exercises.rubric import Rubric
from grader.platforms import classroom, documents, github, gradescope
from grader.platforms.scoring import score
from grader.report import history
from grader.report.files import Rendered, write_reports

GRADESCOPE_FILE = "gradescope.json"         # beside a batch student's reports: Gradescope's results.json


@dataclass(frozen=True)
class Delivery:
    """Where one finished grade goes; every field has its default and says what it does."""

    report_dir: Path | None = doc_field("report.md, report.html, result.json and the maps' SVGs go here (None: no "
                                        "report files).", default=None)
    attempts_of: Path | None = doc_field("The student's file whose attempts are kept (`grader submit`): the grade is "
                                         "one more attempt of it, and the report charts them (None: none kept, as for "
                                         "a batch's students).", default=None)
    document: str | None = doc_field("A --format document to render (platforms/documents.FORMATS but text), or None.",
                                     default=None)
    output_path: Path | None = doc_field("Where the document is written (None: it is returned, for stdout).",
                                         default=None)
    github: bool | None = doc_field("Append the job summary to $GITHUB_STEP_SUMMARY and return the annotations "
                                    "(GitHub Actions; None: where GITHUB_ACTIONS=true).", default=False)
    gradescope_file: bool = doc_field(f"Also write Gradescope's {GRADESCOPE_FILE} into report_dir (a batch: one "
                                      "upload per student).", default=False)


@dataclass
class Delivered:
    """What deliver() did, for its caller to say."""

    written: list[Path] = field(default_factory=list)      # the report files
    html: Path | None = None                               # report.html, where it was written
    report_error: OSError | None = None                    # why the report files could not be written
    change: str | None = None                              # what changed since the file's last attempt
    attempts: list = field(default_factory=list)           # the file's attempts, this one last
    history_error: OSError | None = None                   # why this attempt could not be kept
    document: str | None = None                            # the --format document, unless written to output_path
    classroom_output: bool = False                         # the Classroom line appended to $GITHUB_OUTPUT
    annotations: list[str] = field(default_factory=list)   # GitHub workflow commands, to print


def deliver(result: Result, rubric: Rubric, *, to: Delivery, rendered: Rendered | None = None) -> Delivered:
    """Deliver result as to says. Never raises for a folder it cannot write (the grade stands): the
    report's error is in Delivered.report_error, the history's in history_error. rendered: the
    grade's documents where the caller made them for sinks of its own (a batch: its results.jsonl,
    the course server's store), with no attempts to chart; None: made here, after the history, so
    that the report charts the file's attempts."""
    out = Delivered()
    if to.attempts_of is not None:
        _remember(result, to.attempts_of, out)
    if rendered is None:
        rendered = Rendered(result, rubric, out.attempts or None)
    if to.report_dir is not None:
        try:
            out.written = write_reports(result, rubric, to.report_dir, rendered=rendered)
            if to.gradescope_file:
                doc = gradescope.results(result, score(result, rubric), rendered.markdown)
                out.written.append(to.report_dir / GRADESCOPE_FILE)
                atomic.replace_text(out.written[-1], json.dumps(doc, indent=1) + "\n")
        except OSError as exc:                  # a read-only folder: the grade stands, the report is skipped
            out.report_error = exc
        else:
            out.html = next(p for p in out.written if p.name == "report.html")
    if to.github or (to.github is None and github.in_actions()):
        out.annotations = github.publish(result, rendered.markdown)
    if to.document is not None:
        text = documents.render(to.document, rendered)
        if to.document == "classroom":
            out.classroom_output = classroom.write_output(text.strip())
        if to.output_path is not None:
            to.output_path.parent.mkdir(parents=True, exist_ok=True)
            to.output_path.write_text(text)
        else:
            out.document = text
    return out


def _remember(result: Result, file: Path, out: Delivered) -> None:
    """Keep this attempt of file (the machine's outcome is not an attempt): what changed since the
    last one, and the file's attempts (this one last) for the report's chart."""
    if result.status == Outcome.INFRASTRUCTURE_ERROR:
        try:
            out.attempts = history.attempts(file)
        except OSError:
            pass
        return
    try:
        previous, now = history.record(result, file)
    except OSError as exc:
        out.history_error = exc
        return
    try:
        out.attempts = history.attempts(file)
    except OSError:
        out.attempts = [now]
    out.change = history.change(previous, now)
