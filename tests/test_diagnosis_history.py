"""An outcome that changes between two grades of the same bytes on the same backend is said as such
(grader/report/history.change): the mark of a race, not of an edit (issue 64)."""

from grader.core.results import Result
from grader.report import history


def _graded(correct: bool, sha: str, backend: str = "emulator") -> Result:
    return Result(exercise="e", submission={"sha256": sha}, backend=backend, status="graded", grader_version="0",
                  correct=correct)


def test_the_same_file_with_another_outcome_is_said_to_change_from_run_to_run(tmp_path):
    store, f = tmp_path / "a.jsonl", tmp_path / "racy.cu"
    history.record(_graded(True, "same"), f, path=store, when=0)
    prev, now = history.record(_graded(False, "same"), f, path=store, when=60)
    said = history.change(prev, now)
    assert "the same file was correct then and is incorrect now" in said
    assert "changes from run to run" in said and "atomicAdd" in said


def test_an_edited_file_or_another_backend_is_a_plain_change(tmp_path):
    store, f = tmp_path / "a.jsonl", tmp_path / "k.cu"
    history.record(_graded(False, "old"), f, path=store, when=0)
    prev, now = history.record(_graded(True, "new"), f, path=store, when=60)
    assert history.change(prev, now).endswith(": incorrect -> correct")
    prev, now = history.record(_graded(False, "new", backend="cuda"), f, path=store, when=120)
    said = history.change(prev, now)
    assert said.endswith(": correct -> incorrect") and "run to run" not in said
