"""Output hypotheses declared as data (issue 71): each exercise's rubric lists the mistakes students
make in its formula as variants of the reference, array expressions of the case's inputs, with a
parameter fitted where there is one; a wrong output that matches one is named by it, with the
fitted value. And counts that say what happened: NaN and infinities counted as what they are.

The outputs here are made from each exercise's own reference on its first check case's inputs and
rounded to float32, as a kernel writes them; the end-to-end tests grade wrong kernels on the emulator
and read result.json: five of the mistakes corpus (tests/data/mistakes/, written without reading
grader/verdict/; copied from its branch) and one of this file's own (tests/data/hypotheses/)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from grader.core.checking import POISON_BITS, FailedOutput, GuardDamage, bits_array, compare
from grader.core.errors import RubricError
from grader.exercises import load_exercise, load_reference
from grader.exercises.refmath import INV_SQRT2, erf, gelu_erf, gelu_tanh
from grader.exercises.rubric import dims_values, load_rubric
from grader.verdict import hypotheses
from grader.verdict.diagnosis import diagnose

DATA = Path(__file__).parent / "data"


class Case:
    """An exercise's first check case: its rubric, inputs (float32), dims and derived values, and
    the float64 answer of its output."""

    def __init__(self, exercise: str, dims: dict | None = None):
        self.rubric = load_exercise(exercise)
        ref = load_reference(self.rubric)
        spec = self.rubric.checks.cases[0]
        self.dims = dict(dims or spec.dims)
        self.inputs = {k: np.asarray(v) for k, v in ref.generate("random", self.dims, 1).items()}
        self.values = dims_values(self.rubric, self.dims)
        self.want = ref.answers_for(self.inputs, self.dims)["out"]
        self.out = next(t for t in self.rubric.tensors if t.name == "out")

    def f64(self, name: str) -> np.ndarray:
        return self.inputs[name].astype(np.float64)

    def diagnose(self, output: np.ndarray) -> list:
        """The diagnosis of this output (rounded to float32, as a kernel writes it), as a check makes it."""
        got = np.asarray(output, dtype=np.float64).astype(np.float32)
        tol = self.rubric.tolerance
        cmp = compare(got, self.want, rtol=tol.rtol, atol=tol.atol, init=self.out.init)
        failed = FailedOutput("case", "out", [str(d) for d in self.out.shape], got, self.want, self.inputs,
                              dict(self.dims), tol.rtol, tol.atol, self.out.init, cmp, GuardDamage(0, 0, 0))
        return diagnose(failed, hypotheses=self.rubric.hypotheses, values=self.values)


def fitted(message: str) -> float:
    """The first number in a diagnosis' message (the fitted value, where the variant has one)."""
    return float(re.search(r"-?\d+\.\d+", message).group())


@pytest.fixture(scope="module")
def gelu():
    return Case("bias_gelu_fused")


# -- bias_gelu_fused -------------------------------------------------------------------------


def test_every_output_twice_the_answer_is_the_half_left_out_with_its_factor(gelu):
    found = gelu.diagnose(2 * gelu.want)
    n = gelu.want.size
    assert [d.code for d in found] == ["output_scaled"]
    assert found[0].message == (f"every output is 2.000 times the answer: the 0.5 is missing ({n} of the {n} "
                                "elements written match within the tolerance)")
    found = gelu.diagnose(-0.37 * gelu.want)           # a factor no meaning names: said as fitted
    assert [d.code for d in found] == ["output_scaled"] and found[0].message.startswith(
        "every output is -0.370 times the answer (")


def test_every_output_zero_is_said_as_zero(gelu):
    found = gelu.diagnose(np.zeros_like(gelu.want))
    assert [d.code for d in found] == ["all_zero"]
    assert found[0].message == f"every output is 0 ({gelu.want.size} of the {gelu.want.size} elements written " \
                               "match within the tolerance)"


@pytest.mark.parametrize("scale, meaning", [(0.5, ": v / 2 where v / sqrt(2) is meant"),
                                            (1.0, ": erf(v): the 1 / sqrt(2) is left out"),
                                            (0.9, "")])
def test_erfs_argument_scaled_is_named_with_the_fitted_scale(gelu, scale, meaning):
    v = gelu.f64("x") + gelu.f64("bias")
    found = gelu.diagnose(0.5 * v * (1 + erf(np.float32(scale) * v)))
    assert [d.code for d in found] == ["erf_arg_scaled"]
    assert abs(fitted(found[0].message) - scale) < 5e-4
    assert found[0].message.startswith(f"erf's argument is scaled by {scale:.4f}, not 0.7071{meaning} (")


def test_a_fit_that_is_the_answer_give_or_take_a_rounding_is_a_near_miss_not_a_mistake(gelu):
    """5e-5 relative off everywhere: a factor of 1.00005 fits, but it is the answer within 1e-3."""
    assert [d.code for d in gelu.diagnose(gelu.want * (1 + 5e-5))] == ["near_miss"]


def test_the_tanh_form_and_the_bias_read_by_the_row_are_named_with_what_they_explain(gelu):
    x, b = gelu.f64("x"), gelu.f64("bias")
    assert [d.code for d in gelu.diagnose(gelu_tanh(x + b))] == ["tanh_gelu"]
    rows, cols = x.shape
    by_row = gelu_erf(x + b[np.arange(rows) % cols][:, None])
    found = gelu.diagnose(by_row)
    defined = min(rows, cols) * cols                    # rows past cols read no bias entry
    assert [d.code for d in found] == ["bias_by_row"]
    assert found[0].message == (f"{defined} of the {defined} elements where this mistake is defined match this "
                                f"mistake within tolerance ({rows * cols - defined} more written elements lie where "
                                "it is not defined)")


def test_a_fitted_variant_needs_more_than_a_handful_of_elements():
    """One number fits any one element: at 1 x 1 twice the answer is not said to be a factor."""
    one = Case("bias_gelu_fused", {"rows": 1, "cols": 1})
    assert [d.code for d in one.diagnose(2 * one.want)] == ["wrong_values"]


def test_a_fit_costs_a_bounded_number_of_evaluations(gelu, monkeypatch):
    """The cost of a wrong grade, counted: a factor is fitted in closed form (three evaluations
    and the one compared), erf's scale by a search (at most 25: a grid of 9, then Gauss-Newton steps)."""
    calls = []
    real = hypotheses.evaluate
    monkeypatch.setattr(hypotheses, "evaluate", lambda text, names, **kw: calls.append(text) or real(text, names, **kw))
    gelu.diagnose(2 * gelu.want)
    assert calls.count("k * answer") == 4
    v = gelu.f64("x") + gelu.f64("bias")
    calls.clear()
    gelu.diagnose(0.5 * v * (1 + erf(0.5 * v)))
    assert calls.count("0.5 * v * (1 + erf(s * v))") <= 25


# -- gelu_sum ---------------------------------------------------------------------------------


def test_a_sum_over_the_wrong_axis_is_named_before_the_rows_it_never_writes():
    """out[r][d] = sum over b of gelu(x[r][b][d]), for r < R: the mistake first, then the B - R rows
    it leaves at zero (the advice used to be to cover all B * D outputs)."""
    case = Case("gelu_sum")
    R, B, D = case.dims["R"], case.dims["B"], case.dims["D"]
    out = np.zeros((B, D))
    out[:R] = gelu_erf(case.f64("x")).sum(1)[:R]
    found = case.diagnose(out)
    assert [d.code for d in found] == ["wrong_reduction_axis", f"unwritten_B"]
    assert found[0].message == f"{R * D} of the {R * D} elements written match this mistake within tolerance"
    assert found[1].message.startswith(f"{B - R} of {B} B never written (B {R}..{B - 1})")


def test_a_sum_over_consecutive_floats_is_x_read_as_b_d_r():
    """out[k] += gelu(x[i]) at k = i / R (an atomicAdd's index): x read as [B][D][R]."""
    case = Case("gelu_sum")
    R, B, D = case.dims["R"], case.dims["B"], case.dims["D"]
    out = gelu_erf(case.f64("x").reshape(-1)).reshape(B * D, R).sum(1).reshape(B, D)
    assert [d.code for d in case.diagnose(out)] == ["layout_b_d_r"]


def test_a_mean_is_not_a_sum():
    case = Case("gelu_sum")
    found = case.diagnose(case.want / case.dims["R"])
    assert [d.code for d in found] == ["mean_not_sum"]


def test_an_unzeroed_workspace_is_counted_as_infinities_not_as_no_nan():
    """Every element +Inf (a gelu_sum workspace never zeroed): the message said '0 elements are NaN
    or infinite', counting with isnan where the condition fired on isinf."""
    case = Case("gelu_sum")
    found = case.diagnose(np.full(case.want.shape, np.inf))
    n = case.want.size
    assert [d.code for d in found] == ["nan_output"]
    assert found[0].message == f"of the {n} elements written, {n} are +infinity where the reference is finite"


def test_nan_and_each_infinity_are_counted_as_what_they_are(gelu):
    got = gelu.want.copy()
    got.reshape(-1)[[3, 17, 400]] = np.nan
    got.reshape(-1)[[5, 6]] = np.inf
    got.reshape(-1)[9] = -np.inf
    found = gelu.diagnose(got)
    n = gelu.want.size
    assert [d.code for d in found] == ["nan_output"]
    assert found[0].message == (f"of the {n} elements written, 3 are NaN, 2 are +infinity and 1 is -infinity "
                                "where the reference is finite")
    # an element never written (the poison, a NaN) is counted as unwritten, not as a NaN
    got.reshape(-1)[20] = bits_array(POISON_BITS, 1)[0]
    found = gelu.diagnose(got)
    assert [d.code for d in found] == ["unwritten_elements", "nan_output"]
    assert found[1].message.startswith(f"of the {n - 1} elements written, 3 are NaN, 2 are +infinity")


# -- rope_half_split --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rope():
    return Case("rope_half_split")


def _rope_parts(case):
    x = case.f64("in")
    half = x.shape[-1] // 2
    c, s = case.f64("cosTab")[None, :, None, :], case.f64("sinTab")[None, :, None, :]
    return x[..., :half], x[..., half:], c, s


@pytest.mark.parametrize("code", ["cos_sin_swapped", "halves_swapped", "not_rotated", "interleaved", "reuse_updated",
                                  "table_offset"])
def test_ropes_usual_mistakes_are_named(rope, code):
    x0, x1, c, s = _rope_parts(rope)
    x = rope.f64("in")
    e0, e1 = x[..., 0::2], x[..., 1::2]
    interleaved = np.empty_like(x)
    interleaved[..., 0::2], interleaved[..., 1::2] = e0 * c - e1 * s, e0 * s + e1 * c
    seq = c.shape[1]
    nxt = np.minimum(np.arange(seq) + 1, seq - 1)
    c1, s1 = rope.f64("cosTab")[nxt][None, :, None, :], rope.f64("sinTab")[nxt][None, :, None, :]
    o0 = x0 * c - x1 * s
    made = {"reuse_updated": np.concatenate([o0, o0 * s + x1 * c], -1),
            "table_offset": np.concatenate([o0, x0 * s1 + x1 * c1], -1),
            "cos_sin_swapped": np.concatenate([x0 * s - x1 * c, x0 * c + x1 * s], -1),
            "halves_swapped": np.concatenate([x0 * s + x1 * c, x0 * c - x1 * s], -1),
            "not_rotated": x, "interleaved": interleaved}[code]
    assert [d.code for d in rope.diagnose(made)] == [code]


def test_a_right_answer_on_every_written_element_evaluates_no_hypothesis(rope, monkeypatch):
    """Only the upper half of each head unwritten: every written element is right, no variant can
    explain more of them than the answer does, and none is evaluated."""
    calls = []
    monkeypatch.setattr(hypotheses, "evaluate", lambda *a, **k: calls.append(a[0]))
    got = rope.want.copy()
    half = got.shape[-1] // 2
    got[..., half:] = np.nan
    got = got.astype(np.float32)
    got[..., half:] = bits_array(POISON_BITS, got[..., half:].size).reshape(got[..., half:].shape)
    assert [d.code for d in rope.diagnose(got)] == ["unwritten_headDim"] and calls == []


# -- a new exercise's hypotheses, in YAML alone ---------------------------------------------------

YAML_EXERCISE = """
exercise: wave
title: "wave: out = sin(x) + y"
dims: {n: "elements"}
tensors:
  - {name: x, shape: [n]}
  - {name: y, shape: [n]}
  - {name: out, shape: [n], role: out}
kernel:
  name: wave
  signature: "__global__ void wave(const float* x, const float* y, float* out, int n)"
  grid: ["(n + 127) / 128"]
  block: [128]
hypotheses:
  terms:
    shifted: "y[(arange(n) + 1) % n]"
  variants:
    - code: cos_for_sin
      output: "cos(x) + y"
    - code: frequency
      output: "sin(w * x) + y"
      fit: {w: [0, 4]}
      says: "sin's argument is {w:.3f} times x"
      meanings: {2: "x doubled"}
    - code: y_shifted
      output: "sin(x) + shifted"
      defined: "arange(n) < n - 1"
checks:
  cases: [{dims: {n: 1000}}]
  seeds: [1]
timing:
  dims: {n: 1048576}
  bytes: 12 * n
  copy_floats: n
feedback:
  diagnosis:
    frequency: "Take sin of x itself."
"""


def test_a_new_exercise_names_its_mistakes_from_its_yaml_alone(tmp_path):
    """A rubric written in tmp_path, with no Python for its mistakes: a fitted variant (sin's argument
    scaled), a plain one and one over a term, each named from the output."""
    path = tmp_path / "rubrics" / "wave.yaml"
    path.parent.mkdir()
    path.write_text(YAML_EXERCISE)
    rubric = load_rubric(path)
    assert rubric.mistakes == ("cos_for_sin", "frequency", "y_shifted")
    g = np.random.default_rng(3)
    x, y = (g.uniform(-2, 2, 1000).astype(np.float32) for _ in range(2))
    want = np.sin(x.astype(np.float64)) + y

    def named(output):
        got = output.astype(np.float32)
        cmp = compare(got, want, rtol=1e-5, atol=1e-6)
        failed = FailedOutput("case", "out", ["n"], got, want, {"x": x, "y": y}, {"n": 1000}, 1e-5, 1e-6, "poison",
                              cmp, GuardDamage(0, 0, 0))
        return [(d.code, d.message) for d in diagnose(failed, hypotheses=rubric.hypotheses, values={"n": 1000})]

    xd = x.astype(np.float64)
    assert named(np.sin(2 * xd) + y) == [("frequency", "sin's argument is 2.000 times x: x doubled (1000 of the "
                                                       "1000 elements written match within the tolerance)")]
    (code, message), = named(np.sin(1.25 * xd) + y)
    assert code == "frequency" and abs(fitted(message) - 1.25) < 1e-3
    assert [c for c, _ in named(np.cos(xd) + y)] == ["cos_for_sin"]
    assert [c for c, _ in named(np.sin(xd) + np.roll(y, -1))] == ["y_shifted"]


@pytest.mark.parametrize("variant, key, words", [
    ("{code: a, output: 'sin(q) + y'}", "hypotheses.variants[0].output", "unknown name 'q'"),
    ("{code: a, output: 'sin(x) +'}", "hypotheses.variants[0].output", "not an array expression"),
    ("{code: a, output: 'x.__class__'}", "hypotheses.variants[0].output", "Attribute is not allowed"),
    ("{code: a, output: 'k * x + w', fit: {k: [0, 1], w: [0, 1]}}", "hypotheses.variants[0].fit", "at most one"),
    ("{code: a, output: 'k * x', fit: {k: [1, 0]}}", "hypotheses.variants[0].fit.k", "low < high"),
    ("{code: a, output: 'k * x', fit: {k: [0, 2]}, says: 'by {j}'}", "hypotheses.variants[0].says",
     "{j} names no fitted parameter"),
    ("{code: wrong_values, output: 'x'}", "hypotheses.variants[0].code", "one of the core's"),
    ("{code: a, output: 'x', meanings: {2: two}}", "hypotheses.variants[0].meanings", "fits none"),
])
def test_a_hypothesis_that_cannot_be_computed_is_refused_by_key(tmp_path, variant, key, words):
    text = YAML_EXERCISE[:YAML_EXERCISE.index("hypotheses:")] + f"hypotheses:\n  variants:\n    - {variant}\n" + \
        YAML_EXERCISE[YAML_EXERCISE.index("checks:"):]
    text = text.replace("    frequency: \"Take sin of x itself.\"\n", "    a: \"fix it\"\n")
    path = tmp_path / "wave.yaml"
    path.write_text(text)
    with pytest.raises(RubricError) as err:
        load_rubric(path)
    assert err.value.key == key and words in str(err.value), str(err.value)


def test_mistakes_in_python_are_refused_with_where_they_now_go(tmp_path):
    from grader.core.errors import ExerciseError
    from grader.exercises import Reference

    rubric = load_exercise("bias_gelu_fused")
    folder = tmp_path / "reference" / "bias_gelu_fused"
    folder.mkdir(parents=True)
    (folder / "reference.py").write_text('ARRAYS = "numpy"\ndef expected(t, d):\n    return {"out": t["x"]}\n'
                                         'MISTAKES = {}\n')
    with pytest.raises(ExerciseError, match="MISTAKES is no longer read: declare each mistake as a variant under "
                                            "hypotheses"):
        Reference(rubric, folder, "", "test").module


# -- end to end: wrong kernels graded on the emulator, result.json read ---------------------------

# (file, code, the line the message begins with: where the formula is computed, words it then says)
E2E = [
    ("mistakes/bias_gelu_fused/half_forgotten_macro.cu", "output_scaled", 6,   # the GELU macro's erff
     "every output is 2.000 times the answer: the 0.5 is missing (9797 of the 9797 elements written match"),
    ("mistakes/bias_gelu_fused/erf_over_two.cu", "erf_arg_scaled", 7,
     "erf's argument is scaled by 0.5000, not 0.7071: v / 2 where v / sqrt(2) is meant (9797 of the 9797"),
    ("mistakes/bias_gelu_fused/integer_half.cu", "all_zero", 11, "every output is 0 (9797 of the 9797 elements"),
    ("mistakes/gelu_sum/erf_times_sqrt2.cu", "erf_arg_scaled", 6,                # the helper's erff(v * kSqrt2)
     "erf's argument is scaled by 1.4142, not 0.7071: x * sqrt(2) where x / sqrt(2) is meant (560 of the 560"),
    ("hypotheses/sum_over_b.cu", "wrong_reduction_axis", 12, "160 of the 160 elements written match"),  # acc +=
    # the same mistake unguarded: a later case (R > B) writes past the output, said as a row stride
    # second; the hypothesis that explained the first case's values stays first
    ("mistakes/gelu_sum/sum_over_b.cu", "wrong_reduction_axis", 11, "160 of the 160 elements written match"),
]


@pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")
@pytest.mark.parametrize("name, code, line, words", E2E, ids=[Path(e[0]).name for e in E2E])
def test_a_wrong_kernel_is_named_by_its_hypothesis_in_result_json(tmp_path, name, code, line, words):
    from click.testing import CliRunner

    from grader.cli import cli

    report = tmp_path / "report"
    r = CliRunner().invoke(cli, ["submit", str(DATA / name), "--backend", "emulator", "--report-dir", str(report)],
                           catch_exceptions=False)
    assert r.exit_code in (0, 1), r.output
    result = json.loads((report / "result.json").read_text())
    assert result["status"] == "graded" and result["correct"] is False
    first = result["diagnosis"][0]
    assert first["code"] == code and first["message"].startswith(f"line {line} (`"), first
    assert first["message"].split("`): ", 1)[1].startswith(words), first
    assert first["advice"]                              # the rubric explains the fix
    if name == "mistakes/gelu_sum/sum_over_b.cu":
        assert [d["code"] for d in result["diagnosis"]] == ["wrong_reduction_axis", "row_stride"]


def test_every_count_in_a_diagnosis_is_the_outputs_own(gelu):
    """The numbers the catch-all, a near miss and the slices never written say, recounted here from
    the output itself (rounded to float32, as the check sees it)."""
    tol = gelu.rubric.tolerance

    def recount(output):
        got = np.asarray(output, dtype=np.float64).astype(np.float32).astype(np.float64)
        return got, np.abs(got - gelu.want) > tol.atol + tol.rtol * np.abs(gelu.want)

    noisy = gelu.want + np.random.default_rng(5).standard_normal(gelu.want.shape) * (np.arange(gelu.want.size) % 3 == 0
                                                                                    ).reshape(gelu.want.shape)
    got, bad = recount(noisy)
    found = gelu.diagnose(noisy)
    assert [(d.code, d.message) for d in found] == [("wrong_values", f"{int(bad.sum())} of {gelu.want.size} "
                                                                     "elements wrong")]
    near = gelu.want * (1 + 3e-4 * np.cos(np.arange(gelu.want.size)).reshape(gelu.want.shape))
    got, bad = recount(near)
    rel = np.abs(got - gelu.want) / np.maximum(np.abs(gelu.want), tol.atol)
    found = gelu.diagnose(near)
    assert [(d.code, d.message) for d in found] == [("near_miss", f"largest relative error {rel[bad].max():.2e}, "
                                                                  "above the tolerance")]
    rows, cols = gelu.want.shape
    skipped = gelu.want.astype(np.float32)
    skipped[rows - 7:] = bits_array(POISON_BITS, 7 * cols).reshape(7, cols)
    found = gelu.diagnose(skipped)
    assert [(d.code, d.message) for d in found] == [("unwritten_rows", f"7 of {rows} rows never written "
                                                                       f"(rows {rows - 7}..{rows - 1})")]


def test_a_case_whose_inputs_are_a_timed_shapes_is_not_tried(monkeypatch):
    """gelu_sum's timed shape has 1M outputs but 64M inputs: its variants are float64 passes over the
    inputs (a corpus kernel wrong only at the timed shape held 4 GB for them). A case past MAX_ELEMENTS in its output or any input
    evaluates nothing."""
    case = Case("gelu_sum", {"R": 3, "B": 4, "D": 5})
    monkeypatch.setattr(hypotheses, "MAX_ELEMENTS", 59)            # the 60 inputs are past it, the 20 outputs not
    calls = []
    monkeypatch.setattr(hypotheses, "evaluate", lambda *a, **k: calls.append(a[0]))
    assert [d.code for d in case.diagnose(2 * case.want)] == ["wrong_values"] and calls == []
