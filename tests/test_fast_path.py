"""The fast feedback path: a warm submission imports neither torch in the child nor in the parent,
and a case's answers are computed once, then read back (also when several graders write at once)."""

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from grader.exercises import load_exercise, load_reference
from grader.exercises.data import answers, materialize
from grader.exercises.plan import plan_cases

ROOT = Path(__file__).resolve().parent.parent


def test_the_child_imports_neither_torch_nor_numpy():
    code = ("import sys, grader.run.child.worker, grader.run.child.timing, grader.run.child.backends, grader.core.stats; "
            "print(sorted(m for m in ('torch', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


def test_answers_are_computed_once_then_read_back_by_concurrent_graders(tmp_path):
    rubric = load_exercise("bias_gelu_fused")
    ref = load_reference(rubric)
    case = plan_cases(rubric)[0]
    inputs = materialize(rubric, ref, case, tmp_path)
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda _: answers(rubric, ref, case, tmp_path, inputs), range(8)))
    for a in got[1:]:
        assert np.array_equal(a["out"], got[0]["out"])
    assert got[0]["out"].dtype == np.float64 and got[0]["out"].shape == (case.dims["rows"], case.dims["cols"])
    files = sorted(p.name for p in (tmp_path).glob("in-*/*"))
    assert files == ["answers.f64", "inputs.f32"]           # no temporary file left behind

    class Unused:                                           # a hit must not run the reference again
        def __getattr__(self, name):
            raise AssertionError(f"the reference was used ({name}) although its answers are cached")
    saved = ref._module
    ref._module = Unused()
    try:
        again = answers(rubric, ref, case, tmp_path, inputs)
    finally:
        ref._module = saved
    assert np.array_equal(again["out"], got[0]["out"])


def test_the_fast_checks_limits_are_prepared_once_per_tolerance(tmp_path, monkeypatch):
    import grader.core.checking
    from grader.verdict import expected_for

    rubric = load_exercise("bias_gelu_fused")
    ref = load_reference(rubric)
    case = plan_cases(rubric)[0]
    inputs = materialize(rubric, ref, case, tmp_path)
    first = expected_for(case, rubric, ref, inputs, tmp_path)
    assert len(list(tmp_path.glob("in-*/prepared-*.f32"))) == 1

    def refuse(*_a, **_k):
        raise AssertionError("prepared again although it is cached")
    monkeypatch.setattr(grader.core.checking, "prepare", refuse)
    again = expected_for(case, rubric, ref, inputs, tmp_path)
    assert np.array_equal(again.prepared["out"].limit32, first.prepared["out"].limit32)
    assert np.array_equal(again.prepared["out"].want32, first.want["out"].astype(np.float32))


def test_a_warm_submission_never_imports_torch(tmp_path):
    env = dict(os.environ, GRADER_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(ROOT))
    code = ("import json, sys\n"
            "from grader.exercises import load_exercise\n"
            "from grader.grade.pipeline import grade_submission\n"
            "r = grade_submission(sys.argv[1], rubric=load_exercise('bias_gelu_fused'), backend='emulator')\n"
            "print(json.dumps({'status': r.status, 'correct': r.correct, 'torch': 'torch' in sys.modules}))\n")
    sample = str(ROOT / "submissions" / "bias_gelu_fused" / "float4_launcher.cu")
    runs = [json.loads(subprocess.run([sys.executable, "-c", code, sample], capture_output=True, text=True,
                                      env=env, cwd=ROOT, check=True).stdout.strip().splitlines()[-1])
            for _ in range(2)]
    assert runs[0] == {"status": "graded", "correct": True, "torch": True}      # the first draws and computes
    assert runs[1] == {"status": "graded", "correct": True, "torch": False}     # the warm one reads the cache


def test_the_timed_shape_spreads_over_the_childs_cores_unless_the_file_shares_state(tmp_path, monkeypatch):
    from grader.exercises import load_exercise
    from grader.grade.pipeline import grade_submission

    monkeypatch.setenv("GRADER_CACHE_DIR", str(tmp_path / "cache"))
    rubric = load_exercise("bias_gelu_fused")
    samples = ROOT / "submissions" / "bias_gelu_fused"
    cores = len(os.sched_getaffinity(0))
    every = grade_submission(samples / "float4_launcher.cu", rubric=rubric, backend="emulator")
    assert every.correct and every.sandbox.emulator_threads == cores
    one = grade_submission(samples / "float4_launcher.cu", rubric=rubric, backend="emulator", emulator_threads=1)
    assert one.correct and one.sandbox.emulator_threads == 1
    atomics = grade_submission(ROOT / "submissions" / "gelu_sum" / "atomic_add.cu", rubric=load_exercise("gelu_sum"),
                               backend="emulator")
    assert atomics.correct and atomics.sandbox.emulator_threads == 1
    skipping = grade_submission(samples / "skipped_rows.cu", rubric=rubric, backend="emulator")
    assert skipping.correct is False and skipping.sandbox.emulator_threads == cores
