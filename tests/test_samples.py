"""Every sample submission, end to end on the CPU emulator, gets the outcome its manifest expects,
and the same outcome on one OS thread as on several: each grade runs with the emulator's thread check
(Backend.thread_check), which runs every call a thread count could change on one OS thread and on
two, from the same starting outputs, and ends the grade where their faults or written words differ (issue 71:
a verdict never depends on the machine's cores)."""

import dataclasses

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
    (outcome,) = run_samples(folder, rubric=load_exercise(folder.name), only=[name],
                             backend=dataclasses.replace(EMULATOR, thread_check=True))
    assert "ThreadCountChanged" not in outcome.result.output.stderr, outcome.result.output.stderr
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


def test_a_kernel_at_a_tier_line_may_list_its_tiers_and_an_attack_is_held_to_its_honest_twin():
    """A scalar kernel is 0.60 of the floor on an H200 and 0.755 on an H100, where silver starts at
    0.75: its entry lists both tiers. An attack with a twin (its honest kernel, graded in the same
    run) may reach the twin's fraction and no more (TWIN_NOISE), whatever tier that is on the card."""
    from grader.batch.manifest import TWIN_NOISE, Expectation
    from grader.core.results import Result

    def timed(fraction: float, tier: str) -> Result:
        return Result(exercise="e", submission={}, backend="cuda", status="graded", grader_version="0", correct=True,
                      tier=tier, fraction=fraction)

    line = Expectation("scalar.cu", tier=["below", "silver"])
    assert judge(line, timed(0.755, "silver")) == [] and judge(line, timed(0.60, "below")) == []
    assert judge(line, timed(0.95, "gold")) == ["tier gold, expected below or silver (fraction 0.95)"]
    twin = timed(0.754, "silver")
    attack = Expectation("detour.cu", attack=True, tier=["below", "silver"], twin="scalar.cu")
    assert judge(attack, timed(0.757, "silver"), twin) == []                       # its twin's speed: nothing bought
    bought = judge(attack, timed(0.754 * (1 + TWIN_NOISE) + 0.01, "silver"), twin)
    assert bought and "an attack bought speed" in bought[0] and "scalar.cu's 0.754" in bought[0]
    # without a twin, the old rule: an attack never buys silver or gold its entry does not list
    assert judge(Expectation("a.cu", attack=True), timed(0.8, "silver")) == ["an attack bought silver (fraction 0.8)"]


def test_a_twin_must_be_a_sample_of_the_manifest(tmp_path):
    from grader.core.backend import named
    from grader.core.errors import RubricError

    (tmp_path / "a.cu").write_text("// a\n")
    (tmp_path / "manifest.yaml").write_text("a.cu:\n  attack: true\n  gpu: {twin: nowhere.cu}\n")
    with pytest.raises(RubricError, match="nowhere.cu"):
        load_manifest(tmp_path / "manifest.yaml", named("cuda"), load_exercise("bias_gelu_fused"))


def test_samples_graded_at_once_are_judged_alike_in_the_manifests_order(monkeypatch):
    """`grader samples --jobs`: several samples in flight (threads) give the outcomes one at a time
    gives, reported in the manifest's order whatever order they end in; each sample's leftover
    check looks at its own grade's processes only."""
    from grader.batch import manifest

    folder = ROOT / "submissions" / "rope_half_split"
    names = ["missing_guard.cu", "blog_rotary_launcher.cu", "sign_flipped.cu"]
    names = [e.file for e in load_manifest(folder / "manifest.yaml", EMULATOR, load_exercise(folder.name))
             if e.file in names]
    assert len(names) == 3
    seen = []
    together = run_samples(folder, rubric=load_exercise(folder.name), backend="emulator", only=names, jobs=3,
                           progress=seen.append)
    assert [o.expectation.file for o in together] == names
    assert all(o.ok for o in together), [o.problems for o in together]
    assert sorted(line.split(":")[0] for line in seen) == sorted(names)
    alone = run_samples(folder, rubric=load_exercise(folder.name), backend="emulator", only=names[:1], jobs=1)
    assert (alone[0].result.status, alone[0].result.correct, [d.code for d in alone[0].result.diagnosis]) == \
        (together[0].result.status, together[0].result.correct, [d.code for d in together[0].result.diagnosis])


def test_a_threads_collected_groups_are_its_own():
    """groups.collecting: a Worker started in one thread is that thread's, not another's."""
    import threading

    from grader.run import groups

    got: dict[str, set] = {}

    def start(name: str, pid: int) -> None:
        with groups.collecting() as mine:
            groups.started(pid)
            barrier.wait()
            got[name] = set(mine)

    barrier = threading.Barrier(2)
    threads = [threading.Thread(target=start, args=(n, p)) for n, p in (("a", 999_001), ("b", 999_002))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == {"a": {999_001}, "b": {999_002}}
    assert {999_001, 999_002} <= groups.STARTED_GROUPS
    groups.STARTED_GROUPS -= {999_001, 999_002}
