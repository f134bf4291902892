"""Exercises as data: every shipped exercise keeps its contract, a file finds its exercise, and
a course's own exercise (a folder outside the grader) grades with no change to the grader."""

import shutil
import textwrap

import numpy as np
import pytest
from click.testing import CliRunner

from grader.cli import cli
from grader.core.errors import ExerciseError
from grader.exercises import choose, exercise_files, exercise_for_source, load_all, load_reference
from grader.exercises.data import draw
from grader.exercises.plan import plan_cases, shape_of, timed_cases
from grader.exercises.rubric import dims_values


@pytest.mark.parametrize("name", sorted(exercise_files()))
def test_each_exercise_keeps_its_contract(name):
    rubric = load_all()[name]
    ref = load_reference(rubric)
    outputs = [t for t in rubric.tensors if t.role == "out" and not t.chain]
    for case in plan_cases(rubric):
        inputs = draw(rubric, ref, case)                        # shapes and dtypes are checked by draw
        want = ref.answers_for(inputs, dict(case.dims))
        values = dims_values(rubric, case.dims)
        for t in outputs:
            assert tuple(want[t.name].shape) == shape_of(t, values) and want[t.name].dtype == np.float64
    # Every hypothesis evaluates at every check case's shape, to the output's shape, and is a different
    # function from the answer on random inputs (beyond the margin diagnosis matches with), or it would
    # name right answers as mistakes.
    from grader.verdict.hypotheses import variant_output

    largest = max((c for c in plan_cases(rubric) if c.inputs == "random"), key=lambda c: sum(c.dims.values()))
    for case in plan_cases(rubric):
        if case.timed:
            continue
        inputs = draw(rubric, ref, case)
        right = ref.answers_for(inputs, dict(case.dims))[outputs[0].name]
        values = dims_values(rubric, case.dims)
        for v in rubric.hypotheses.variants:
            wrong, mask = variant_output(rubric.hypotheses, v, inputs, values, right)
            assert wrong.shape == right.shape and (mask is None or mask.shape == right.shape), (v.code, case.name)
            if case.name != largest.name:
                continue
            tol = rubric.tolerance
            differs = np.abs(wrong - right) > 4 * (tol.atol + tol.rtol * np.abs(right))   # diagnosis's margin
            assert bool((differs if mask is None else differs & mask).any()), (v.code, case.name)
    assert len(timed_cases(rubric)) == rubric.timing.input_sets


def test_a_file_finds_its_exercise_by_kernel_launcher_or_closest_name(write_cu):
    assert exercise_for_source(write_cu("__global__ void ropeHalfSplit(const float* in) {}\n")).exercise == \
        "rope_half_split"
    launcher_only = "__global__ void mine(float* o) {}\nvoid launchRope(const float* in, const float* c, " \
                    "const float* s, float* out, int b, int q, int h, int d, cudaStream_t st) {}\n"
    assert exercise_for_source(write_cu(launcher_only)).exercise == "rope_half_split"
    assert exercise_for_source(write_cu("__global__ void biasGeluFused(float* o) {}\n")).exercise == "bias_gelu_fused"
    assert exercise_for_source(write_cu("__global__ void ropeHalfSpilt(float* o) {}\n")).exercise == "rope_half_split"
    assert exercise_for_source(write_cu("// ropeHalfSplit in a comment only\n__global__ void k() {}\n")) is None
    assert choose(file=write_cu("__global__ void k() {}\n")).exercise == "bias_gelu_fused"     # the default


def test_grader_exercises_lists_every_exercise_with_its_contract():
    r = CliRunner().invoke(cli, ["exercises"])
    assert r.exit_code == 0, r.output
    assert "bias_gelu_fused:" in r.output and "rope_half_split:" in r.output
    assert "launchRope(" in r.output and "in[batch][seq][heads][headDim] float32" in r.output


COURSE_RUBRIC = """
exercise: saxpy
title: "saxpy: y = a * x + y"
dims: {n: "elements"}
tensors:
  - {name: x, shape: [n]}
  - {name: y, shape: [n]}
  - {name: out, shape: [n], role: out}
kernel:
  name: saxpy
  signature: "__global__ void saxpy(const float* x, const float* y, float* out, int n)"
  grid: ["(n + 127) / 128"]
  block: [128]
hypotheses:
  variants:
    - {code: forgot_a, output: "x + y"}
checks:
  cases: [{dims: {n: 1}}, {dims: {n: 1000}}]
  seeds: [1]
timing:
  dims: {n: 1048576}
  bytes: 12 * n
  copy_floats: n
feedback:
  diagnosis:
    forgot_a: "Multiply x by 2 (a) before adding y."
"""

COURSE_REFERENCE = """
from grader.exercises.inputs import uniform

def random(dims, seed):
    n = dims["n"]
    return {"x": uniform(n, seed, 0, -1.0, 1.0), "y": uniform(n, seed, 1, -1.0, 1.0)}

GENERATORS = {"random": random}

def expected(t, dims):
    return {"out": 2.0 * t["x"].double() + t["y"].double()}
"""


# The same exercise laid out as new exercises are: the generators in numpy (inputs.py), the
# answers with torch (reference.py); its mistake is the rubric's, as every exercise's is.
COURSE_INPUTS = """
from grader.exercises.draws import uniform

def random(dims, seed):
    n = dims["n"]
    return {"x": uniform(n, seed, 0, -1.0, 1.0), "y": uniform(n, seed, 1, -1.0, 1.0)}

GENERATORS = {"random": random}
"""
COURSE_ANSWERS = COURSE_REFERENCE[COURSE_REFERENCE.index("def expected"):]
# ... and its answers in numpy, as the shipped exercises are (no torch in the grader).
COURSE_NUMPY_ANSWERS = """
import numpy as np

ARRAYS = "numpy"

def expected(t, dims):
    return {"out": 2.0 * t["x"].astype(np.float64) + t["y"]}
"""


@pytest.fixture(params=["reference.py draws", "inputs.py draws", "numpy answers"])
def own_exercise(request, tmp_path, monkeypatch):
    """A course's own exercise (saxpy) in a folder outside the grader, named by GRADER_EXERCISES."""
    from grader.exercises import _LOADED

    root = tmp_path / "course"
    (root / "rubrics").mkdir(parents=True)
    (root / "reference" / "saxpy").mkdir(parents=True)
    (root / "rubrics" / "saxpy.yaml").write_text(COURSE_RUBRIC)
    if request.param == "inputs.py draws":
        (root / "reference" / "saxpy" / "inputs.py").write_text(COURSE_INPUTS)
        (root / "reference" / "saxpy" / "reference.py").write_text(COURSE_ANSWERS)
    elif request.param == "numpy answers":
        (root / "reference" / "saxpy" / "inputs.py").write_text(COURSE_INPUTS)
        (root / "reference" / "saxpy" / "reference.py").write_text(COURSE_NUMPY_ANSWERS)
    else:
        (root / "reference" / "saxpy" / "reference.py").write_text(COURSE_REFERENCE)
    monkeypatch.setenv("GRADER_EXERCISES", str(root))
    _LOADED.clear()
    yield root
    _LOADED.clear()


@pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")
def test_a_courses_own_exercise_grades_with_no_change_to_the_grader(own_exercise, write_cu):
    from grader.grade.pipeline import grade_submission

    good = write_cu(textwrap.dedent("""
        __global__ void saxpy(const float* x, const float* y, float* out, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) out[i] = 2.0f * x[i] + y[i];
        }
    """), "good.cu")
    rubric = choose(file=good)
    assert rubric.exercise == "saxpy"
    result = grade_submission(good, rubric=rubric, backend="emulator")
    assert (result.status, result.correct, result.exercise) == ("graded", True, "saxpy"), result.message
    wrong = write_cu(good.read_text().replace("2.0f * x[i]", "x[i]"), "wrong.cu")
    result = grade_submission(wrong, rubric=rubric, backend="emulator")
    assert result.correct is False and [d.code for d in result.diagnosis] == ["forgot_a"]
    assert result.diagnosis[0].advice == "Multiply x by 2 (a) before adding y."


def test_a_broken_reference_is_named(own_exercise):
    from grader.exercises import _LOADED

    _LOADED.clear()
    ref = own_exercise / "reference" / "saxpy" / "reference.py"
    ref.write_text(COURSE_REFERENCE + 'MISTAKES = {"forgot_a": lambda t, dims: (t["x"] + t["y"], None)}\n')
    rubric = choose(exercise="saxpy")
    with pytest.raises(ExerciseError, match=r"reference\.py: MISTAKES is no longer read: declare each mistake as a "
                                            r"variant under hypotheses"):
        load_reference(rubric).module             # checked when first imported
    _LOADED.clear()
    ref.write_text('ARRAYS = "jax"\n' + COURSE_REFERENCE)
    with pytest.raises(ExerciseError, match=r"reference\.py: ARRAYS is 'jax'; .* 'torch' or 'numpy'"):
        load_reference(choose(exercise="saxpy")).module
    inputs = own_exercise / "reference" / "saxpy" / "inputs.py"
    if inputs.is_file():                          # the generators are checked where they are written
        _LOADED.clear()
        inputs.write_text(COURSE_INPUTS.replace('{"random": random}', '{"rand": random}'))
        with pytest.raises(ExerciseError, match=r"inputs\.py has no generator 'random'"):
            load_reference(choose(exercise="saxpy")).inputs
    _LOADED.clear()
    ref.unlink()
    with pytest.raises(ExerciseError, match=r"reference\.py: no such file"):
        load_reference(rubric)
    _LOADED.clear()


def test_calibration_rows_carry_each_runs_byte_model_and_fraction_of_the_floor():
    from grader.grade.calibration import _rows, render
    from grader.exercises import load_exercise

    rubric = load_exercise("bias_gelu_fused")
    values = dims_values(rubric, rubric.timing.dims)
    n = values["rows"] * values["cols"]
    ms = {"copy_scalar": 0.055, "copy_vec4": 0.036, "memcpy": 0.037, rubric.calibrate.runs[0].name: 0.060,
          rubric.calibrate.runs[1].name: 0.210, rubric.calibrate.runs[2].name: 0.110}
    from grader.core.contract import CalibrationFrame

    cal = _rows(rubric, CalibrationFrame({k: [v] * 5 for k, v in ms.items()}, {"name": "test"}), 8 * n, values)
    assert cal.floor_kind == "copy_vec4"
    by = {r.name: r for r in cal.rows}
    staged = by[rubric.calibrate.runs[1].name]
    assert staged.bytes_moved == 28 * n and abs(staged.fraction - (28 / 0.210) / (8 / 0.036)) < 1e-9
    text = render(cal)
    assert "# 7 floats per element" in text and "gold at 0.90" in text


def test_a_calibrate_run_needs_its_reference_kernel(own_exercise):
    from grader.exercises import _LOADED

    _LOADED.clear()
    rubric_path = own_exercise / "rubrics" / "saxpy.yaml"
    rubric_path.write_text(COURSE_RUBRIC + "calibrate:\n  runs:\n    - name: copy\n      steps: [{kernel: nothing, "
                           "args: [x, out, n]}]\n      bytes: 8 * n\n")
    with pytest.raises(ExerciseError, match="exports no grader_ref_nothing"):
        load_reference(choose(exercise="saxpy"))
    _LOADED.clear()


def test_the_torch_inputs_are_the_numpy_draws_bit_for_bit():
    import numpy as np

    from grader.exercises import draws, inputs

    for n, seed, stream in ((1, 0, 0), (1001, 7, 2), (65537, 2**70 + 3, 1)):
        assert np.array_equal(inputs.hashes(n, seed, stream).numpy(), draws.hashes(n, seed, stream))
        a, b = inputs.uniform(n, seed, stream, -4.0, 4.0).numpy(), draws.uniform(n, seed, stream, -4.0, 4.0)
        assert a.dtype == b.dtype == np.float32 and np.array_equal(a.view(np.uint32), b.view(np.uint32))
        assert b.min() >= -4.0 and b.max() < 4.0


def test_drawing_every_exercises_cases_never_imports_torch(tmp_path):
    """Each shipped exercise draws its inputs with numpy (its inputs.py): a first grade's inputs are
    on disk without waiting for torch's import, which only the answers need."""
    import subprocess
    import sys

    code = f"""
import sys
from pathlib import Path
from grader.core.backend import CUDA
from grader.exercises import exercise_files, load_exercise, load_reference
from grader.exercises.data import materialize
from grader.exercises.plan import run_cases
for name in sorted(exercise_files()):
    rubric = load_exercise(name)
    ref = load_reference(rubric)
    for case in run_cases(rubric, timed=True, secret=99):
        if not case.timed:
            arrays = materialize(rubric, ref, case, Path({str(tmp_path)!r}))
            assert all(a.dtype.name == "float32" for a in arrays.values()), (name, case.name)
assert "torch" not in sys.modules, "torch was imported"
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]


def test_the_childs_timing_settings_are_the_rubrics_by_name_and_what_is_worked_out_from_it():
    import dataclasses

    from grader.exercises import load_exercise
    from grader.grade.jobs import _timing_job

    rubric = load_exercise("bias_gelu_fused")
    changed = dataclasses.replace(rubric, timing=dataclasses.replace(rubric.timing, warmup=7, budget_s=4.5,
                                                                     floor_buffers=2, baseline="x.sum()"))
    job = _timing_job(changed)
    assert (job.warmup, job.budget_s, job.floor_buffers, job.baseline) == (7, 4.5, 2, "x.sum()")
    # where the tier changes under the rubric's policy (median: each line), the margin and the floor
    assert job.tier_lines == pytest.approx(sorted([rubric.tiers.silver, rubric.tiers.gold, 1.0,
                                                   1.0 + rubric.tiers.exceeds_floor_margin]))
    assert job.chain is True
    assert job.copy_floats == 16384 * 1024


def test_the_exercise_a_file_defines_is_found_loading_rubrics_only_up_to_it(monkeypatch):
    """`grader submit` chooses the exercise before its children start: it loads the rubrics one by
    one up to the first whose kernel the file defines, not every one."""
    from pathlib import Path

    from grader import exercises
    from grader.exercises import rubric

    loaded = []
    real = rubric.load_rubric
    monkeypatch.setattr(rubric, "load_rubric", lambda path=None: loaded.append(Path(path).stem) or real(path))
    names = list(exercises.exercise_files())
    assert names[0] == "bias_gelu_fused" and names[-1] == "rope_half_split"
    found = exercises.exercise_for_source(Path("submissions/bias_gelu_fused/float4_launcher.cu"))
    assert found.exercise == "bias_gelu_fused" and loaded == ["bias_gelu_fused"]
    loaded.clear()
    found = exercises.exercise_for_source(Path("submissions/rope_half_split/lesson_half_split.cu"))
    assert found.exercise == "rope_half_split" and loaded == names
