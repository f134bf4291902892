"""Every sample submission, end to end on the CPU emulator, gets the outcome its manifest expects."""

import pytest

from grader.manifest import judge, load_manifest, run_samples
from conftest import SUBMISSIONS

EXPECTATIONS = load_manifest(SUBMISSIONS / "manifest.yaml", "emulator")


@pytest.mark.slow
@pytest.mark.parametrize("name", [e.file for e in EXPECTATIONS])
def test_sample_on_the_emulator(name, rubric):
    (outcome,) = run_samples(SUBMISSIONS, rubric=rubric, backend="emulator", only=[name])
    assert outcome.ok, f"{name}: {outcome.problems}"
    assert outcome.result.backend == "emulator" and outcome.result.tier is None


def test_manifest_lists_every_sample():
    stored = {e.file for e in EXPECTATIONS if e.generate_bytes is None}
    on_disk = {p.name for p in SUBMISSIONS.glob("*.cu")}
    assert stored == on_disk
    assert not (SUBMISSIONS / "huge_source.cu").exists()        # generated at its size, never committed


def test_judge_reports_differences():
    from grader.manifest import Expectation
    from grader.results import Result

    r = Result(exercise="e", submission={}, backend="emulator", status="graded", grader_version="0", correct=False)
    assert judge(Expectation("x.cu", status="graded", correct=True), r) == ["correct False, expected True"]
    assert "diagnosis tanh_gelu missing" in judge(Expectation("x.cu", diagnosis=["tanh_gelu"]), r)[0]
