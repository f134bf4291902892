import torch

from grader.checking import GUARD_BITS, POISON_BITS, bits_tensor, compare, read_guards
from grader.diagnosis import diagnose
from grader.checking import GuardDamage
from grader.reference_math import bias_gelu, gelu_erf, gelu_tanh

TOL = dict(rtol=1e-5, atol=1e-6)


def inputs(rows=6, cols=5):
    g = torch.Generator().manual_seed(0)
    return torch.randn(rows, cols, generator=g) * 2, torch.randn(cols, generator=g) * 0.5


def test_exact_output_passes():
    x, b = inputs()
    want = bias_gelu(x, b)
    cmp = compare(want.float(), want, **TOL)
    assert cmp.passed and cmp.bad == 0 and cmp.first is None and cmp.max_abs_error < 1e-6


def test_first_mismatch_is_row_col_with_got_and_want():
    x, b = inputs()
    want = bias_gelu(x, b)
    got = want.float().clone()
    got[2, 3] += 0.5
    got[4, 1] += 0.5
    cmp = compare(got, want, **TOL)
    assert not cmp.passed and cmp.bad == 2
    assert (cmp.first.row, cmp.first.col) == (2, 3)
    assert abs(cmp.first.got - cmp.first.want - 0.5) < 1e-5


def test_poisoned_elements_count_as_unwritten():
    x, b = inputs()
    want = bias_gelu(x, b)
    got = want.float().clone()
    got.view(-1)[7:9] = bits_tensor(POISON_BITS, 2)
    cmp = compare(got, want, **TOL)
    assert cmp.unwritten == 2 and cmp.bad == 2


def test_guards_count_writes_outside_the_output():
    pad, n = 8, 10
    full = torch.zeros(n + 2 * pad)
    full.view(torch.int32)[:] = GUARD_BITS
    full[pad + n + 2] = 1.0
    full[pad + n + 5] = 1.0
    full[1] = 3.0
    g = read_guards(full, pad, n)
    assert (g.before, g.after, g.farthest_after) == (1, 2, 6)
    assert g.damaged


def codes(got, x, b):
    want = bias_gelu(x, b)
    cmp = compare(got, want, **TOL)
    return [d.code for d in diagnose(got, want, x, b, cmp, GuardDamage(0, 0, 0), **TOL)]


def test_diagnoses_the_usual_mistakes():
    x, b = inputs(40, 30)
    xd, bd = x.double(), b.double()
    assert codes(gelu_tanh(xd + bd).float(), x, b) == ["tanh_gelu"]
    assert codes(gelu_erf(xd).float(), x, b) == ["bias_missing"]
    assert codes((gelu_erf(xd) + bd).float(), x, b) == ["bias_after_gelu"]
    row_bias = torch.cat([bd, bd[:10]])          # rows past cols read no real bias entry: not judged
    by_row = gelu_erf(xd + row_bias[:, None]).float()
    assert codes(by_row, x, b)[0] == "bias_by_row"


def test_diagnoses_unwritten_rows_and_columns():
    x, b = inputs(8, 6)
    want = bias_gelu(x, b).float()
    rows = want.clone()
    rows[5:] = bits_tensor(POISON_BITS, 18).view(3, 6)
    assert "unwritten_rows" in codes(rows, x, b)
    cols = want.clone()
    cols[:, 4:] = bits_tensor(POISON_BITS, 16).view(8, 2)
    assert "unwritten_cols" in codes(cols, x, b)


def test_near_miss_and_nan():
    x, b = inputs(8, 6)
    want = bias_gelu(x, b)
    assert codes((want * (1 + 5e-5)).float(), x, b) == ["near_miss"]
    nan = want.float().clone()
    nan[0, 0] = float("nan")
    assert "nan_output" in codes(nan, x, b)


def test_guard_damage_is_diagnosed_even_when_values_match():
    x, b = inputs()
    want = bias_gelu(x, b)
    cmp = compare(want.float(), want, **TOL)
    found = diagnose(want.float(), want, x, b, cmp, GuardDamage(0, 3, 7), **TOL)
    assert [d.code for d in found] == ["writes_past_output"] and "7 floats past" in found[0].message


def test_fast_path_agrees_with_the_exact_comparison_at_the_boundary():
    from grader.checking import prepare

    x, b = inputs(50, 40)
    want = bias_gelu(x, b)
    tol = 1e-6 + 1e-5 * want.abs()
    for scale in (0.5, 0.995, 1.005, 2.0):                  # well inside, just inside, just outside, outside
        got = (want + scale * tol).float()
        exact = compare(got, want, **TOL)
        fast = compare(got, want, **TOL, prepared=prepare(want, **TOL))
        assert (fast.passed, fast.bad) == (exact.passed, exact.bad), scale
