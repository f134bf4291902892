"""The checks on numpy arrays (what the parent compares), against the exercise's reference (numpy,
as bias_gelu_fused's reference.py is written) and its hypotheses as the grader runs them (the
rubric's `hypotheses`)."""

import numpy as np

from grader.core.checking import GUARD_BITS, POISON_BITS, bits_array, compare, read_guards
from grader.verdict import diagnosis
from grader.core.checking import FailedOutput, GuardDamage
import pytest

TOL = dict(rtol=1e-5, atol=1e-6)


@pytest.fixture(autouse=True)
def _reference(bias_gelu, rubric):
    from grader.exercises import load_reference

    global ref, bias_gelu_fn, gelu_erf, gelu_tanh, models
    ref = bias_gelu
    load_reference(rubric)
    models = rubric.hypotheses
    bias_gelu_fn, gelu_erf, gelu_tanh = ref.bias_gelu, ref.gelu_erf, ref.gelu_tanh


def inputs(rows=6, cols=5):
    g = np.random.default_rng(0)
    return ((g.standard_normal((rows, cols)) * 2).astype(np.float32),
            (g.standard_normal(cols) * 0.5).astype(np.float32))


def bias_gelu_np(x, b):
    """The exercise's reference, in float64."""
    return bias_gelu_fn(x, b)


def test_exact_output_passes():
    x, b = inputs()
    want = bias_gelu_np(x, b)
    cmp = compare(want.astype(np.float32), want, **TOL)
    assert cmp.passed and cmp.bad == 0 and cmp.first is None and cmp.max_abs_error < 1e-6


def test_first_mismatch_is_row_col_with_got_and_want():
    x, b = inputs()
    want = bias_gelu_np(x, b)
    got = want.astype(np.float32)
    got[2, 3] += 0.5
    got[4, 1] += 0.5
    cmp = compare(got, want, **TOL)
    assert not cmp.passed and cmp.bad == 2
    assert cmp.first.index == [2, 3]
    assert abs(cmp.first.got - cmp.first.want - 0.5) < 1e-5


def test_poisoned_elements_count_as_unwritten():
    x, b = inputs()
    want = bias_gelu_np(x, b)
    got = want.astype(np.float32)
    got.reshape(-1)[7:9] = bits_array(POISON_BITS, 2)
    cmp = compare(got, want, **TOL)
    assert cmp.unwritten == 2 and cmp.bad == 2


def test_guards_count_writes_outside_the_output():
    pad, n = 8, 10
    full = np.zeros(n + 2 * pad, dtype=np.float32)
    full.view(np.uint32)[:] = GUARD_BITS
    full[pad + n + 2] = 1.0
    full[pad + n + 5] = 1.0
    full[1] = 3.0
    g = read_guards(full, pad, n)
    assert (g.before, g.after, g.farthest_after) == (1, 2, 6)
    assert g.damaged


def diagnose(got, want, inputs, dims, cmp, guards, *, rtol, atol, axes, mistakes, init="poison"):
    """diagnosis.diagnose of the one failed output these make (as the case's check makes it);
    mistakes: the hypotheses tried (None: none)."""
    values = dict(dims, n=dims["rows"] * dims["cols"]) if "rows" in dims else dims
    return diagnosis.diagnose(FailedOutput("case", "out", axes, got, want, inputs, dims, rtol, atol, init, cmp, guards),
                              hypotheses=mistakes, values=values)


def run_diagnose(got, x, b, guards=GuardDamage(0, 0, 0)):
    want = bias_gelu_np(x, b)
    cmp = compare(got, want, **TOL)
    return diagnose(got, want, {"x": x, "bias": b}, {"rows": x.shape[0], "cols": x.shape[1]}, cmp, guards, **TOL,
                    axes=["rows", "cols"], mistakes=models)


def codes(got, x, b):
    return [d.code for d in run_diagnose(got, x, b)]


def test_no_mistake_model_runs_where_every_written_element_is_right(monkeypatch):
    from grader.verdict import hypotheses

    """issue 35: rows skipped at the timed shape leave the written elements right; no mistake can
    explain more of them than the right answer, so none of the models (a float64 pass over the
    whole output each, 2.5 s at 16M elements) is run: skipped_rows.cu went from 11 s to 1.8 s."""
    x, b = inputs(40, 30)
    got = bias_gelu_np(x, b).astype(np.float32)
    got[30:] = np.frombuffer(np.full(10 * 30, 0x7FC0DEAD, dtype=np.uint32).tobytes(), dtype=np.float32).reshape(10, 30)
    want = bias_gelu_np(x, b)
    cmp = compare(got, want, **TOL)
    ran = []
    real = hypotheses.evaluate
    monkeypatch.setattr(hypotheses, "evaluate", lambda text, names, **kw: ran.append(text) or real(text, names, **kw))
    found = diagnose(got, want, {"x": x, "bias": b}, {"rows": 40, "cols": 30}, cmp, GuardDamage(0, 0, 0), **TOL,
                     axes=["rows", "cols"], mistakes=models)
    assert [d.code for d in found] == ["unwritten_rows"] and ran == []
    got[0, 0] += 1.0                     # one written element wrong: the hypotheses are tried again
    found = diagnose(got, want, {"x": x, "bias": b}, {"rows": 40, "cols": 30}, compare(got, want, **TOL),
                     GuardDamage(0, 0, 0), **TOL, axes=["rows", "cols"], mistakes=models)
    assert {v.output for v in models.variants} <= set(ran)


def test_diagnoses_the_usual_mistakes():
    x, b = inputs(40, 30)
    xd, bd = x.astype(np.float64), b.astype(np.float64)
    assert codes(gelu_tanh(xd + bd).astype(np.float32), x, b) == ["tanh_gelu"]
    assert codes(gelu_erf(xd).astype(np.float32), x, b) == ["bias_missing"]
    assert codes((gelu_erf(xd) + bd).astype(np.float32), x, b) == ["bias_after_gelu"]
    row_bias = np.concatenate([bd, bd[:10]])     # rows past cols read no real bias entry: not judged
    by_row = gelu_erf(xd + row_bias[:, None]).astype(np.float32)
    assert codes(by_row, x, b)[0] == "bias_by_row"
    said = run_diagnose(by_row, x, b)[0].message          # 30 of 40 rows have a bias entry: it counts those
    assert said.startswith("900 of the 900 elements where this mistake is defined match"), said
    assert "(300 more written elements lie where it is not defined)" in said


def test_diagnoses_unwritten_rows_and_columns():
    x, b = inputs(8, 6)
    want = bias_gelu_np(x, b).astype(np.float32)
    rows = want.copy()
    rows[5:] = bits_array(POISON_BITS, 18).reshape(3, 6)
    assert "unwritten_rows" in codes(rows, x, b)
    cols = want.copy()
    cols[:, 4:] = bits_array(POISON_BITS, 16).reshape(8, 2)
    assert "unwritten_cols" in codes(cols, x, b)
    scattered = want.copy()
    scattered[1, 2] = bits_array(POISON_BITS, 1)[0]
    assert codes(scattered, x, b)[0] == "unwritten_elements"


def test_unwritten_slices_are_found_along_any_axis_of_a_4d_output():
    from grader.core.checking import compare as cmp_
    want = np.random.default_rng(1).standard_normal((2, 3, 4, 8))
    got = want.astype(np.float32)
    got[..., 4:] = bits_array(POISON_BITS, 2 * 3 * 4 * 4).reshape(2, 3, 4, 4)      # the upper half of every head
    c = cmp_(got, want, **TOL)
    found = diagnose(got, want, {}, {}, c, GuardDamage(0, 0, 0), **TOL, axes=["batch", "seq", "heads", "headDim"],
                     mistakes=None)
    assert [d.code for d in found] == ["unwritten_headDim"]
    assert "4 of 8 headDim never written (headDim 4..7)" in found[0].message
    assert c.first.index == [0, 0, 0, 4]


def test_near_miss_and_nan():
    x, b = inputs(8, 6)
    want = bias_gelu_np(x, b)
    assert codes((want * (1 + 5e-5)).astype(np.float32), x, b) == ["near_miss"]
    nan = want.astype(np.float32)
    nan[0, 0] = np.nan
    assert "nan_output" in codes(nan, x, b)


def test_guard_damage_is_diagnosed_even_when_values_match():
    x, b = inputs()
    want = bias_gelu_np(x, b)
    found = run_diagnose(want.astype(np.float32), x, b, GuardDamage(0, 3, 7))
    assert [d.code for d in found] == ["writes_past_output"] and "7 floats past" in found[0].message


def test_fast_path_agrees_with_the_exact_comparison_at_the_boundary():
    from grader.core.checking import prepare

    x, b = inputs(50, 40)
    want = bias_gelu_np(x, b)
    tol = 1e-6 + 1e-5 * np.abs(want)
    for scale in (0.5, 0.995, 1.005, 2.0):                  # well inside, just inside, just outside, outside
        got = (want + scale * tol).astype(np.float32)
        exact = compare(got, want, **TOL)
        fast = compare(got, want, **TOL, prepared=prepare(want, **TOL))
        assert (fast.passed, fast.bad) == (exact.passed, exact.bad), scale


def test_an_output_that_starts_at_zero_is_unwritten_where_it_is_still_zero_and_should_not_be():
    want = np.random.default_rng(2).random((4, 6)) + 0.5
    want[0, 0] = 0.0                                  # a true zero: written or not, it is right
    got = want.astype(np.float32)
    got[3] = 0.0                                       # the last row never written
    c = compare(got, want, **TOL, init="zero")
    assert c.unwritten == 6 and c.bad == 6
    found = diagnose(got, want, {}, {}, c, GuardDamage(0, 0, 0), **TOL, axes=["B", "D"], mistakes=None, init="zero")
    assert [d.code for d in found] == ["unwritten_B"] and "still hold the zero" in found[0].message
    nothing = np.zeros((4, 6), dtype=np.float32)
    c = compare(nothing, want, **TOL, init="zero")
    found = diagnose(nothing, want, {}, {}, c, GuardDamage(0, 0, 0), **TOL, axes=["B", "D"], mistakes=None, init="zero")
    # 23 of 24 unwritten (the true zero is not): rows 1..3 and columns 1..5 whole
    assert [(d.code, d.message.split(" (")[0]) for d in found] == [("unwritten_B", "3 of 4 B never written"),
                                                                    ("unwritten_D", "5 of 6 D never written")]


def _compare_in_one_pass(got, want, rtol, atol):
    """The exact comparison written in one float64 pass (what compare's block-by-block path must agree with)."""
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(got.astype(np.float64) - want)
        bad = ~(diff <= np.abs(want) * rtol + atol)
        rel = diff[bad] / np.maximum(np.abs(want[bad]), atol)
        rel = rel[np.isfinite(rel)]
        first = np.flatnonzero(bad.reshape(-1))
    return (int(bad.sum()), int((got.view(np.uint32) == POISON_BITS).sum()),
            [int(i) for i in np.unravel_index(int(first[0]), want.shape)] if first.size else None,
            float(np.nan_to_num(diff, nan=0.0, posinf=0.0).max()),
            (float(rel.max()) if rel.size else float("inf")) if bad.any() else 0.0)


@pytest.mark.parametrize("damage", ["none", "scattered", "last_block_only", "unwritten_block", "inf_only",
                                    "all_wrong", "zero_answers"])
def test_the_block_by_block_comparison_agrees_with_one_float64_pass(damage):
    """compare's exact path runs a block at a time over the shared threads (an incorrect timed shape
    is 16M values): counts, the first mismatch, the worst absolute and relative errors as one pass."""
    from grader.core.blocks import BLOCK

    rng = np.random.default_rng(7)
    want = rng.standard_normal((5, BLOCK // 2 + 37))            # a few blocks and a ragged last one
    got = want.astype(np.float32)
    flat = got.reshape(-1)
    if damage == "scattered":
        flat[rng.choice(flat.size, 500, replace=False)] += 0.5
        flat[rng.choice(flat.size, 50, replace=False)] = bits_array(POISON_BITS, 50)
    elif damage == "last_block_only":
        flat[-3:] = 7.0
    elif damage == "unwritten_block":
        flat[BLOCK: 2 * BLOCK] = bits_array(POISON_BITS, BLOCK)
    elif damage == "inf_only":
        flat[[3, BLOCK + 9]] = np.inf
    elif damage == "all_wrong":                                 # the bias missing everywhere
        flat += 0.3
    elif damage == "zero_answers":                              # the relative error divides by atol there
        want.reshape(-1)[::3] = 0.0
        flat[::3] = 1e-3
    cmp = compare(got, want, rtol=1e-5, atol=1e-6)
    bad, unwritten, first, max_abs, max_rel = _compare_in_one_pass(got, want, 1e-5, 1e-6)
    assert (cmp.bad, cmp.unwritten, cmp.first.index if cmp.first else None) == (bad, unwritten, first)
    assert cmp.passed == (bad == 0) and cmp.max_abs_error == pytest.approx(max_abs)
    assert cmp.max_rel_error == pytest.approx(max_rel)
    if damage == "inf_only":
        assert cmp.max_rel_error == float("inf") and cmp.bad == 2
