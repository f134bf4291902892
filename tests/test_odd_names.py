"""Any file name a file system allows is built and graded: `$` (ninja's escape), spaces, `:`,
quotes, a newline, a leading `-`, bytes that are not UTF-8. Nothing of the name reaches a shell or
a build file unescaped; the reports and the class's tables stay valid UTF-8."""

from __future__ import annotations

import csv
import os
from pathlib import Path

from grader.toolchain.build import ninja_text_of

ROOT = Path(__file__).resolve().parent.parent
GOOD = (ROOT / "submissions" / "bias_gelu_fused" / "float4_launcher.cu").read_bytes()
NAMES = [b"k$(b).cu", b"a b:c.cu", b"it's \"q\".cu", b"-lead.cu", b"new\nline.cu", b"bad\xff.cu"]


def test_ninja_text_escapes_dollars_and_ends_no_line():
    assert ninja_text_of("cuda build of k$(b).cu") == "cuda build of k$$(b).cu"
    assert ninja_text_of("a\nb\rc") == "a b c"


def test_a_class_of_odd_names_is_graded_correct_with_its_tables_and_links(tmp_path):
    from grader.batch import grade_folder
    from grader.exercises.rubric import load_rubric

    cls = tmp_path / "class"
    cls.mkdir()
    for name in NAMES:
        with open(os.path.join(os.fsencode(cls), name), "wb") as f:
            f.write(GOOD)
    out = tmp_path / "out"
    outcome = grade_folder(cls, rubric=load_rubric(), backend="emulator", report_dir=out)
    assert len(outcome.graded) == len(NAMES)
    for g in outcome.graded:
        assert g.result is not None and g.result.status == "graded" and g.result.correct, (g.entry.student,
                                                                                           g.result and g.result.message)
    rows = list(csv.DictReader((out / "summary.csv").open(encoding="utf-8")))     # valid UTF-8
    assert len(rows) == len(NAMES)
    html = (out / "class.html").read_text(encoding="utf-8")
    assert 'href="k%24%28b%29/report.html"' in html and 'href="bad%FF/report.html"' in html
    assert (out / os.fsdecode(b"bad\xff") / "report.html").is_file()


def test_a_file_deleted_or_a_class_folder_moved_while_the_batch_runs_is_graded_as_listed(tmp_path, monkeypatch):
    """Each file is read once, when the class is listed (batch/inputs.py): bob's file deleted and
    then the whole class folder moved away (real ones, between the listing and bob's grade) change
    nothing of the grades, and no student is the machine's failure."""
    import grader.batch.grading as grading
    from grader.batch import grade_folder
    from grader.exercises.rubric import load_rubric

    cls = tmp_path / "class"
    cls.mkdir()
    for who in ("alice", "bob", "carol"):
        (cls / f"{who}.cu").write_bytes(GOOD)
    original = grading._ClassRun.one

    def one(self, index, entry):
        if entry.student == "bob" and cls.exists():
            (cls / "bob.cu").unlink()
            cls.rename(tmp_path / "moved")
        return original(self, index, entry)

    monkeypatch.setattr(grading._ClassRun, "one", one)
    out = tmp_path / "out"
    outcome = grade_folder(cls, rubric=load_rubric(), backend="emulator", report_dir=out, jobs=1)
    rows = {r["student"]: r for r in csv.DictReader((out / "summary.csv").open())}
    assert all(rows[who]["status"] == "graded" and rows[who]["correct"] == "true" for who in ("alice", "bob", "carol"))
    assert (out / "class.html").is_file() and (out / "gradebook.csv").is_file()
    assert not outcome.infrastructure_failures
