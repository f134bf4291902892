"""A batch takes no student's file through a link, and names identical submissions.

find_submissions resolves each file before anything opens it: a link that leaves the student's
folder (or, for flat files, the class folder), or lands on another student's file, is refused for
that student, naming the link and its target. The files it then reads, it reads with no link
followed (tests/test_read_once.py); a link the listing allows (one inside the student's own
folder, or a flat file's onto no student's file) is read by where it leads. A link to a FIFO stands for /etc/shadow here: were
it opened, the test would hang instead of failing quietly.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest

import grader.core.handin as handin
from grader.batch.inputs import find_submissions

ROOT = Path(__file__).resolve().parent.parent
GOOD = (ROOT / "submissions" / "bias_gelu_fused" / "float4_launcher.cu").read_text()
OTHER = (ROOT / "submissions" / "bias_gelu_fused" / "scalar_2d.cu").read_text()


@pytest.fixture(params=["openat2", "walk"])
def opener(request, monkeypatch):
    """Each listing twice: files read with openat2, and with the O_NOFOLLOW walk a kernel without
    it gets (core/handin.py)."""
    monkeypatch.setattr(handin, "_openat2_missing", request.param == "walk")
    return request.param


@pytest.fixture
def outside(tmp_path) -> dict[str, Path]:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "theirs.cu").write_text(OTHER)
    fifo = elsewhere / "pipe"
    os.mkfifo(fifo)
    return {"file": elsewhere / "theirs.cu", "fifo": fifo, "folder": elsewhere}


def _by_student(directory: Path) -> dict:
    return {e.student: e for e in find_submissions(directory)}


def test_links_out_of_a_students_folder_are_refused_naming_link_and_target(tmp_path, outside, opener):
    cls = tmp_path / "class"
    for who in ("alice", "bob", "carol", "erin", "gus", "hal"):
        (cls / who).mkdir(parents=True)
    (cls / "alice" / "kernel.cu").write_text(GOOD)
    (cls / "bob" / "kernel.cu").symlink_to("../alice/kernel.cu")                # a classmate's file
    (cls / "carol" / "kernel.cu").symlink_to(outside["fifo"])                   # never opened
    (cls / "dave").symlink_to("alice")                                           # a linked folder
    (cls / "erin" / "kernel.cu").symlink_to(outside["file"])                     # a file outside the class
    (cls / "gus" / "src").symlink_to(outside["folder"])                          # a linked folder inside
    (cls / "hal" / "src").mkdir()
    (cls / "hal" / "src" / "kernel.txt").write_text(OTHER)
    (cls / "hal" / "kernel.cu").symlink_to("src/kernel.txt")                     # a link of the student's own
    found = _by_student(cls)
    assert found["alice"].problem is None and found["hal"].problem is None
    bob = found["bob"]
    assert bob.problem == "linked" and "../alice/kernel.cu" in bob.detail and "outside bob/" in bob.detail
    assert found["carol"].problem == "linked" and str(outside["fifo"]) in found["carol"].detail
    assert found["dave"].problem == "linked" and "dave is a link to alice" in found["dave"].detail
    assert found["erin"].problem == "linked" and str(outside["file"]) in found["erin"].detail
    assert found["gus"].problem == "missing"          # the linked folder is not entered: nothing of its own


def test_flat_files_may_not_link_out_of_the_class_or_onto_a_classmate(tmp_path, outside, opener):
    cls = tmp_path / "class"
    (cls / "shared").mkdir(parents=True)
    (cls / "alice.cu").write_text(GOOD)
    (cls / "bob.cu").symlink_to("alice.cu")
    (cls / "carol.cu").symlink_to(outside["fifo"])
    (cls / "dora.cu").symlink_to(outside["file"])
    (cls / "shared" / "kept.cu").write_text(OTHER)
    (cls / "eve.cu").symlink_to("shared/kept.cu")       # a folder in the class is a student: shared's file
    (cls / ".kept").mkdir()
    (cls / ".kept" / "fred.cu").write_text(OTHER)
    (cls / "fred.cu").symlink_to(".kept/fred.cu")       # no student's folder (hidden): the instructor's own layout
    found = _by_student(cls)
    assert found["alice"].problem is None
    assert found["bob"].problem == "linked" and "alice's file" in found["bob"].detail
    assert found["carol"].problem == "linked" and "outside the class folder" in found["carol"].detail
    assert found["dora"].problem == "linked"
    assert found["eve"].problem == "linked" and "shared's file" in found["eve"].detail
    assert found["fred"].problem is None and ".kept" not in found


def test_identical_submissions_are_named_for_each_student(tmp_path):
    cls = tmp_path / "class"
    for who, text in (("alice", GOOD), ("bob", GOOD), ("carol", OTHER), ("dan", GOOD)):
        (cls / who).mkdir(parents=True)
        (cls / who / "kernel.cu").write_text(text)
    found = _by_student(cls)
    assert found["alice"].identical_to == ("bob/kernel.cu", "dan/kernel.cu")
    assert found["bob"].identical_to == ("alice/kernel.cu", "dan/kernel.cu")
    assert found["carol"].identical_to == ()
    assert found["alice"].sha256 == found["bob"].sha256 != found["carol"].sha256


def test_a_batch_writes_the_links_and_the_identical_files_into_its_tables(tmp_path, monkeypatch):
    from grader.batch import grade_folder
    from grader.batch.classreport import summarise
    from grader.exercises.rubric import load_rubric

    cls = tmp_path / "class"
    for who in ("alice", "bob", "carol"):
        (cls / who).mkdir(parents=True)
    (cls / "alice" / "kernel.cu").write_text(GOOD)
    (cls / "bob" / "kernel.cu").write_text(GOOD)
    (cls / "carol" / "kernel.cu").symlink_to("../alice/kernel.cu")
    out = tmp_path / "out"
    rubric = load_rubric()
    outcome = grade_folder(cls, rubric=rubric, backend="emulator", report_dir=out)
    rows = {r["student"]: r for r in csv.DictReader((out / "summary.csv").open())}
    assert rows["alice"]["identical_to"] == "identical to bob/kernel.cu"
    assert rows["bob"]["identical_to"] == "identical to alice/kernel.cu"
    assert rows["carol"]["status"] == "linked" and "../alice/kernel.cu" in rows["carol"]["message"]
    book = {r["student"]: r for r in csv.DictReader((out / "gradebook.csv").open())}
    assert book["alice"]["identical_to"] == "identical to bob/kernel.cu" and book["carol"]["points"] == "0"
    summary = summarise(outcome.graded, rubric, out)
    assert summary.identical == [["alice", "bob"]]
    html = (out / "class.html").read_text()
    assert "Identical submissions" in html and "alice, bob" in html
    assert summary.unconfined == [] or not _landlock()


def _landlock() -> bool:
    from grader.run.child import fswall

    return fswall.landlock_abi() > 0
