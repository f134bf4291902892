"""An exercise's dimensions into numbers, and its cases into the child's buffers and calls."""

import pytest

from grader.core import exprs
from grader.exercises import load_exercise
from grader.exercises.plan import case_job, plan_cases, timed_cases


@pytest.mark.parametrize("text,values,want", [
    ("(cols + 255) / 256", {"cols": 97}, 1),
    ("(cols + 255) / 256", {"cols": 257}, 2),
    ("-7 / 2", {}, -3),                      # C truncates toward zero
    ("-7 // 2", {}, -4),                     # // floors, as Python's
    ("-7 % 3", {}, -1),                      # C's remainder keeps the dividend's sign
    ("ceil_div(n, 4) * 4", {"n": 9}, 12),
    ("max(a, b) - min(a, b)", {"a": 3, "b": 10}, 7),
    (42, {}, 42),
])
def test_integer_expressions_follow_c(text, values, want):
    assert exprs.evaluate(text, values) == want


def test_float_expressions_and_errors():
    assert exprs.evaluate("1e-6 * sqrt(R)", {"R": 16}, integer=False) == pytest.approx(4e-6)
    for bad, words in [("rows +", "not an arithmetic"), ("open('x')", "only numbers"), ("pow(2, 3)", "unknown function"),
                       ("a.b", "only numbers"), ("[1]", "only numbers")]:
        with pytest.raises(exprs.ExprError, match=words):
            exprs.evaluate(bad, {"a": 1})
    with pytest.raises(exprs.ExprError, match="unknown name 'c'"):
        exprs.evaluate("c + 1", {"rows": 1})
    with pytest.raises(exprs.ExprError, match="division by zero"):
        exprs.evaluate("n / 0", {"n": 1})
    with pytest.raises(exprs.ExprError, match="whole number"):
        exprs.evaluate("n / 2.0", {"n": 3})
    assert exprs.names("(batch * seq + min(a, 2))") == {"batch", "seq", "a"}


def test_a_case_becomes_buffers_and_the_default_launch_or_the_launchers_arguments():
    rope = load_exercise("rope_half_split")
    case = plan_cases(rope)[0]                                  # the lesson's 3 x 17 x 5 x 64
    files = {"in": ("f", 0), "cosTab": ("f", 65280), "sinTab": ("f", 67456)}
    job = case_job(rope, case, has_launcher=False, files=files)
    assert [(b.name, b.floats, b.role, b.shape) for b in job.buffers] == [
        ("in", 16320, "in", [3, 17, 5, 64]), ("cosTab", 544, "in", [17, 32]), ("sinTab", 544, "in", [17, 32]),
        ("out", 16320, "out", [3, 17, 5, 64])]
    assert job.buffer("cosTab").offset == 65280 and job.buffer("out").file == ""
    # (in, cosTab, sinTab, out, pairs, halfDim, heads, seq), one thread per pair
    assert [a.tensor or a.value for a in job.launch.args] == ["in", "cosTab", "sinTab", "out", 8160, 32, 5, 17]
    assert job.launch.grid == [32, 1, 1] and job.launch.block == [256, 1, 1]
    mine = case_job(rope, case, has_launcher=True, files=files)
    # launchRope(in, cosTab, sinTab, out, batch, seq, heads, headDim, stream)
    assert [a.tensor or a.value for a in mine.launch.args] == ["in", "cosTab", "sinTab", "out", 3, 17, 5, 64]


def test_the_chain_runs_only_where_a_case_asks_and_the_timed_sets_are_distinct():
    bias = load_exercise("bias_gelu_fused")
    lesson, plain = plan_cases(bias)[0], plan_cases(bias)[1]
    chained = case_job(bias, lesson, has_launcher=False, files={})
    assert chained.chain.kernel == "add_residual" and {b.name for b in chained.buffers} >= {"r", "chain"}
    assert [a.tensor or a.value for a in chained.chain.args] == ["out", "r", "chain", 101 * 97]
    alone = case_job(bias, plain, has_launcher=False, files={})
    assert alone.chain is None and {b.name for b in alone.buffers} == {"x", "bias", "out"}
    sets = timed_cases(bias)
    assert len({s.seed for s in sets}) == len(sets) == bias.timing.input_sets and all(s.timed for s in sets)


def test_a_gpu_runs_random_cases_are_private_to_the_run_and_its_lesson_cases_are_not():
    """With a run's secret, every seeded check and every timed set draws from a seed that mixes
    the secret in (a kernel cannot recognise seed 1000's inputs); a generator without a seed is
    public. The names students read keep the rubric's seeds."""
    bias = load_exercise("bias_gelu_fused")
    public, one, two = plan_cases(bias), plan_cases(bias, secret=0xABCDEF), plan_cases(bias, secret=0x123456)
    assert [c.name for c in one] == [c.name for c in public]
    for p, a, b in zip(public, one, two):
        if p.inputs == "lesson":
            assert not a.private and a.draw_seed == p.draw_seed == 0
        else:
            assert a.private and b.private and not p.private
            assert p.draw_seed == p.seed and len({p.draw_seed, a.draw_seed, b.draw_seed}) == 3
    timed = timed_cases(bias, secret=7)
    assert all(t.private and t.draw_seed not in (1000, 1001) for t in timed)
    assert len({t.draw_seed for t in timed}) == len(timed)
