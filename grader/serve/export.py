"""`grader serve export`: the class's files from the store, written by the batch's own writers
(batch/outputs.py, batch/classreport.py), so they are the files `grader batch --report-dir` writes.

Each student's row is their latest graded upload (by default before the deadline): the file a
student handed in last is the one that counts, as in a batch of the class's folder, and a student
who tried something riskier after a good grade chose to. The best one stays on the student's page
and in the instructor's live table. A student with a token and no graded upload is `missing`.
"""

from __future__ import annotations

import json
from pathlib import Path

from grader.batch.classreport import write_class_report
from grader.batch.grading import Graded
from grader.batch.inputs import Entry
from grader.batch.outputs import write_gradebook, write_platform_exports, write_summary
from grader.batch.similarity import class_similarity
from grader.core import atomic
from grader.core.errors import UsageError
from grader.core.handin import SourceFile, held
from grader.core.outcomes import Outcome
from grader.core.results import result_from_json
from grader.exercises import load_exercise
from grader.serve.store import DONE, INSTRUCTOR, Store


def chosen(store: Store, *, include_late: bool = False) -> dict:
    """Each student's upload that counts: their latest graded one (never the machine's failure),
    before the deadline unless include_late."""
    latest: dict[str, object] = {}
    for row in store.all_uploads():                # oldest first: a later one replaces an earlier one
        if row["state"] == DONE and row["status"] != Outcome.INFRASTRUCTURE_ERROR and (include_late or not row["late"]):
            latest[row["student"]] = row
    return latest


def graded_rows(store: Store, *, include_late: bool = False) -> list[tuple]:
    """The class as the batch's Graded rows, each with its upload's id (None: no upload): each
    student's latest graded upload (none of the machine's failures), as an Entry holding the
    upload's bytes and its Result."""
    latest = chosen(store, include_late=include_late)
    rows = []
    for student in sorted(set(store.students()) | set(latest)):
        row = latest.get(student)
        if row is None:
            rows.append((Graded(Entry(student, None, "missing", "no graded upload on the course server"), None), None))
            continue
        data = store.data(row["id"])
        source = SourceFile(held(Path(row["name"]), data), data, row["sha256"], len(data))   # the digest taken on upload
        rows.append((Graded(Entry(student, source.path, source=source), result_from_json(json.loads(row["result"]))),
                     row["id"]))
    return rows


def export_class(folder: Path, *, out: Path, include_late: bool = False) -> int:
    """Write the class's files into out (gradebook.csv, summary.csv, junit.xml, class.html,
    insights.json, each student's reports and Gradescope results.json); how many students."""
    store = Store(Path(folder))
    exercise = store.setting("exercise")
    if exercise is None:
        raise UsageError(f"{folder} holds no course server's store yet (`grader serve {folder} --exercise NAME` "
                         "starts one)")
    rubric = load_exercise(exercise)
    rows = [(g, upload) for g, upload in graded_rows(store, include_late=include_late) if g.entry.student != INSTRUCTOR]
    out.mkdir(parents=True, exist_ok=True)
    reports: dict[str, str] = {}
    for g, upload in rows:                  # each stored document written as the store holds it
        if upload is None:
            continue
        kept = store.query("SELECT result, report_md, report_html FROM uploads WHERE id = ?", (upload,))[0]
        for column, name in (("result", "result.json"), ("report_md", "report.md"), ("report_html", "report.html")):
            atomic.replace_text(out / g.entry.student / name, kept[column])
        reports[g.entry.student] = kept["report_md"]
    graded = [g for g, _upload in rows]
    similar = class_similarity(graded, rubric=rubric)           # the uploads' bytes, as a batch's
    write_summary(graded, out / "summary.csv", similarity=similar)
    write_gradebook(graded, rubric, out / "gradebook.csv")
    write_platform_exports(graded, rubric, out, reports=reports)
    write_class_report(graded, rubric, out / "class.html", similarity=similar)
    return len(graded)
