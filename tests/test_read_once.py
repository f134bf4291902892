"""A batch reads each student's file once, through a descriptor no link redirects (issue 65).

The listing reads each file by a descriptor opened beneath the student's folder without following
a link (core/handin.py), and those bytes are what is keyed, built, hashed and reported: a file
swapped for a link after the listing (before or during its grade) is graded as it was listed, and
nothing of the link's target reaches a report. A hard link to a classmate's file is `linked` for
both, naming both; a hard link to a root-only file outside the class is `linked` and never read.
The tests run as root here, as a batch on a shared machine may.
"""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

import pytest

import grader.core.handin as handin
from grader.batch.inputs import find_submissions
from grader.core.errors import UsageError
from grader.core.results import Result

SIGNATURE = ("__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias, "
             "float* __restrict__ out, size_t cols)")
# Bob's own file: the exercise's kernel, with a compile error on a line of his own (the report quotes it).
BOB = SIGNATURE + " {\n  bobs_own_undeclared_name = 1;\n}\n"
# What a swapped link leads to: a kernel that fails the same way on a line that is the secret, so
# that were it built, the compile error would quote it into the reports.
SECRET = "ROOT_ONLY_SECRET_91c2"
SECRET_TEXT = SIGNATURE + f" {{\n  {SECRET} = 1;\n}}\n"


@pytest.fixture(params=["openat2", "walk"])
def opener(request, monkeypatch):
    """Each test twice: with openat2, and with the O_NOFOLLOW walk a kernel without it gets."""
    monkeypatch.setattr(handin, "_openat2_missing", request.param == "walk")
    return request.param


@pytest.fixture
def secret(tmp_path) -> Path:
    """A root-only file outside the class (mode 0600)."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    path = folder / "secret.cu"
    path.write_text(SECRET_TEXT)
    path.chmod(0o600)
    return path


def _everything_under(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file())


def test_open_beneath_follows_no_link_and_leaves_no_folder(tmp_path, opener):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f.cu").write_text("x")
    (tmp_path / "a" / "lb").symlink_to("b")
    (tmp_path / "a" / "b" / "lf.cu").symlink_to("f.cu")
    (tmp_path / "outside.cu").write_text("y")
    fd = os.open(tmp_path / "a", os.O_RDONLY | os.O_DIRECTORY)
    try:
        f = handin.open_beneath(fd, "b/f.cu")
        assert os.read(f, 4) == b"x"
        os.close(f)
        for rel, err in (("lb/f.cu", errno.ELOOP), ("b/lf.cu", errno.ELOOP), ("../outside.cu", errno.EXDEV),
                         (str(tmp_path / "outside.cu"), errno.EXDEV)):
            with pytest.raises(OSError) as caught:
                handin.open_beneath(fd, rel)
            assert caught.value.errno == err, rel
    finally:
        os.close(fd)


def test_a_held_path_reads_as_the_bytes_read_and_a_refused_one_never_reads(tmp_path):
    p = tmp_path / "k.cu"
    p.write_text("listed")
    source = handin.read_file(p)
    p.write_text("changed since")
    assert source.path.read_text() == "listed" and source.path.read_bytes() == b"listed"
    with source.path.open() as f:
        assert f.read() == "listed"
    assert source.path.name == "k.cu" and source.path == p and source.path.parent.is_dir()
    refused = handin.held(p, None, "a link")
    with pytest.raises(PermissionError, match="a link"):
        refused.read_text()


def test_grader_submit_reads_a_file_but_not_through_a_link_at_its_end(tmp_path):
    (tmp_path / "k.cu").write_text("x")
    (tmp_path / "link.cu").symlink_to("k.cu")
    assert handin.read_file(tmp_path / "k.cu").data == b"x"
    with pytest.raises(UsageError, match="is a link"):
        handin.read_file(tmp_path / "link.cu")
    with pytest.raises(UsageError, match="a folder"):
        handin.read_file(tmp_path)
    with pytest.raises(UsageError, match="no such file"):
        handin.read_file(tmp_path / "none.cu")
    os.mkfifo(tmp_path / "pipe.cu")
    with pytest.raises(UsageError, match="not a regular file"):        # refused by fstat, never waited on
        handin.read_file(tmp_path / "pipe.cu")


@pytest.mark.parametrize("when", ["before its grade", "during its build"])
@pytest.mark.parametrize("what", ["file", "folder"])
def test_a_file_swapped_for_a_link_after_the_listing_is_graded_as_listed(tmp_path, monkeypatch, secret, what, when):
    """List the class, then replace bob's file (or his folder) with a link to a root-only file
    outside: bob is graded from the bytes the listing read (his own compile error), and the
    secret's bytes are in no file of the report folder."""
    import grader.batch.grading as grading
    import grader.grade.pipeline as pipeline
    from grader.batch import grade_folder
    from grader.exercises.rubric import load_rubric

    cls = tmp_path / "class"
    (cls / "bob").mkdir(parents=True)
    (cls / "bob" / "kernel.cu").write_text(BOB)
    swapped = []

    def swap() -> None:
        if swapped:
            return
        swapped.append(True)
        if what == "file":
            (cls / "bob" / "kernel.cu").unlink()
            (cls / "bob" / "kernel.cu").symlink_to(secret)
        else:
            (cls / "bob").rename(tmp_path / "bob-was")
            (cls / "bob").symlink_to(secret.parent, target_is_directory=True)
            (secret.parent / "kernel.cu").symlink_to("secret.cu")

    if when == "before its grade":
        original = grading._ClassRun.one

        def one(self, index, entry):
            swap()
            return original(self, index, entry)

        monkeypatch.setattr(grading._ClassRun, "one", one)
    else:
        built = pipeline.build_and_screen

        def build(*args, **kwargs):
            swap()
            return built(*args, **kwargs)

        monkeypatch.setattr(pipeline, "build_and_screen", build)
    out = tmp_path / "out"
    outcome = grade_folder(cls, rubric=load_rubric(), backend="emulator", report_dir=out, jobs=1)
    assert swapped
    bob = outcome.graded[0]
    assert bob.entry.student == "bob" and bob.result is not None
    assert bob.result.status == "compile_error" and "bobs_own_undeclared_name" in bob.result.message
    assert SECRET.encode() not in _everything_under(out)
    assert bob.result.submission["sha256"] == hashlib.sha256(BOB.encode()).hexdigest()


def test_a_hard_link_to_a_classmates_file_is_linked_for_both_naming_both(tmp_path, opener):
    cls = tmp_path / "class"
    for who in ("alice", "bob", "carol"):
        (cls / who).mkdir(parents=True)
    (cls / "alice" / "kernel.cu").write_text(BOB)
    os.link(cls / "alice" / "kernel.cu", cls / "bob" / "kernel.cu")
    (cls / "carol" / "kernel.cu").write_text(BOB)                   # the same bytes, a file of her own
    found = {e.student: e for e in find_submissions(cls)}
    alice, bob, carol = found["alice"], found["bob"], found["carol"]
    assert bob.problem == alice.problem == "linked"
    assert "bob/kernel.cu" in bob.detail and "alice's alice/kernel.cu" in bob.detail and "hard links" in bob.detail
    assert "bob's bob/kernel.cu" in alice.detail
    assert bob.source is None and alice.source is None and carol.problem is None and carol.source is not None
    with pytest.raises(PermissionError):
        bob.path.read_bytes()                                     # nothing can read it through the entry


def test_a_hard_link_to_a_root_only_file_outside_the_class_is_refused_and_never_read(tmp_path, monkeypatch, secret,
                                                                                        opener):
    """Bob's kernel.cu is a second name of a root-only file outside the class: `linked`, with a
    message; no read of the grader's returns its bytes, and a batch grades nobody with them."""
    import grader.grade.pipeline as pipeline
    from grader.batch import grade_folder
    from grader.exercises.rubric import load_rubric

    cls = tmp_path / "class"
    for who in ("alice", "bob"):
        (cls / who).mkdir(parents=True)
    (cls / "alice" / "kernel.cu").write_text(BOB)
    os.link(secret, cls / "bob" / "kernel.cu")
    reads = []
    real_read = os.read

    def read(fd, n):
        data = real_read(fd, n)
        reads.append(data)
        return data

    monkeypatch.setattr(handin.os, "read", read)
    graded = []

    def grade(request, *, inputs=None, progress=None):
        graded.append(request.source.data)
        return Result(exercise=request.rubric.exercise, submission={"path": str(request.path), "sha256": ""},
                      backend="emulator", status="compile_error", grader_version="t", message="stood in for")

    found = {e.student: e for e in find_submissions(cls)}
    bob = found["bob"]
    assert bob.problem == "linked" and "a hard link to a file outside the class" in bob.detail
    assert "bob/kernel.cu" in bob.detail and bob.source is None
    assert found["alice"].problem is None and found["alice"].source.data == BOB.encode()
    monkeypatch.setattr(pipeline, "grade", grade)
    out = tmp_path / "out"
    outcome = grade_folder(cls, rubric=load_rubric(), backend="emulator", report_dir=out, jobs=1)
    assert graded == [BOB.encode()]                                   # alice's grade, the only one asked for
    assert [g.entry.problem for g in outcome.graded] == [None, "linked"]
    assert not any(SECRET.encode() in data for data in reads)
    assert SECRET.encode() not in _everything_under(out)


def test_the_exercise_is_chosen_from_the_bytes_the_listing_read(tmp_path):
    """`grader batch` chooses the exercise from each Entry.path: a listed file's reads as the bytes
    the listing read (the file rewritten since changes nothing), a refused one's never opens (a link
    to a FIFO would hang the choice)."""
    from grader.exercises import exercise_for_class

    cls = tmp_path / "class"
    (cls / "alice").mkdir(parents=True)
    (cls / "carol").mkdir()
    (cls / "alice" / "kernel.cu").write_text(BOB)
    os.mkfifo(tmp_path / "pipe")
    (cls / "carol" / "kernel.cu").symlink_to(tmp_path / "pipe")
    entries = find_submissions(cls)
    (cls / "alice" / "kernel.cu").write_text("__global__ void ropeHalfSplit(const float* in) {}\n")
    assert [e.problem for e in entries] == [None, "linked"]
    assert exercise_for_class([e.path for e in entries if e.path]).exercise == "bias_gelu_fused"
