"""Every sample submission, end to end on the CPU emulator, gets the outcome its manifest expects."""

import pytest

from grader.core.backend import EMULATOR
from grader.exercises import exercise_files, load_exercise
from grader.batch.manifest import judge, load_manifest, run_samples
from conftest import ROOT, sample_folders

SAMPLES = [(folder, e) for folder in sample_folders()
           for e in load_manifest(folder / "manifest.yaml", EMULATOR, load_exercise(folder.name))]


@pytest.mark.slow
@pytest.mark.parametrize("folder,name", [(f, e.file) for f, e in SAMPLES], ids=[f"{f.name}/{e.file}" for f, e in SAMPLES])
def test_sample_on_the_emulator(folder, name):
    (outcome,) = run_samples(folder, rubric=load_exercise(folder.name), backend="emulator", only=[name])
    assert outcome.ok, f"{name}: {outcome.problems}"
    assert outcome.result.backend == "emulator" and outcome.result.tier is None


def test_every_exercise_has_samples_and_every_sample_is_listed():
    assert {f.name for f in sample_folders()} == set(exercise_files())
    assert not [p for p in (ROOT / "submissions").glob("*.cu")]              # samples live in their exercise's folder
    for folder in sample_folders():
        stored = {e.file for f, e in SAMPLES if f == folder and e.generate_bytes is None}
        assert stored == {p.name for p in folder.glob("*.cu")}, folder.name
        assert not (folder / "huge_source.cu").exists()        # generated at its size, never committed


def test_judge_reports_differences():
    from grader.batch.manifest import Expectation
    from grader.core.results import Result

    r = Result(exercise="e", submission={}, backend="emulator", status="graded", grader_version="0", correct=False)
    assert judge(Expectation("x.cu", status="graded", correct=True), r) == ["correct False, expected True"]
    assert "diagnosis tanh_gelu missing" in judge(Expectation("x.cu", diagnosis=["tanh_gelu"]), r)[0]
    # an attack never buys silver or gold, whatever else its entry leaves open
    bought = Result(exercise="e", submission={}, backend="cuda", status="graded", grader_version="0", correct=True,
                    tier="silver", fraction=0.8)
    assert judge(Expectation("a.cu", attack=True), bought) == ["an attack bought silver (fraction 0.8)"]
    assert judge(Expectation("a.cu", attack=False), bought) == []
