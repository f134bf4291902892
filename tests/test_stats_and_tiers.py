import dataclasses
from pathlib import Path

import pytest
import torch

from grader.verdict.tiers import assign_tier
from grader.core.stats import fraction_interval, median


def test_median():
    assert median([3.0, 1.0, 2.0]) == 2.0


def test_interval_brackets_the_ratio_and_narrows_with_less_noise():
    g = torch.Generator().manual_seed(1)
    floor = (36 + torch.randn(200, generator=g) * 0.2).tolist()
    sub = (40 + torch.randn(200, generator=g) * 0.2).tolist()
    ci = fraction_interval(floor, sub, resamples=500)
    assert ci.low <= ci.median <= ci.high
    assert abs(ci.median - 0.9) < 0.005
    assert ci.half_width < 0.005
    noisy = fraction_interval(floor, (40 + torch.randn(200, generator=g) * 4).tolist(), resamples=500)
    assert noisy.half_width > ci.half_width


def test_interval_needs_paired_samples():
    with pytest.raises(ValueError):
        fraction_interval([1.0, 2.0], [1.0], resamples=10)


def _policy(rubric, policy, **more):
    return dataclasses.replace(rubric, tiers=dataclasses.replace(rubric.tiers, borderline_policy=policy, **more))


@pytest.mark.parametrize("frac, low, high, tier, borderline", [
    (0.95, 0.94, 0.96, "gold", False),
    (0.90, 0.895, 0.905, "gold", True),
    (0.89, 0.885, 0.905, "silver", True),
    (0.80, 0.79, 0.81, "silver", False),
    (0.70, 0.69, 0.71, "below", False),
])
def test_tiers_from_the_median(rubric, frac, low, high, tier, borderline):
    assert assign_tier(frac, low, high, _policy(rubric, "median"))[:2] == (tier, borderline)


def test_policy_lower_and_upper(rubric):
    assert assign_tier(0.905, 0.895, 0.915, _policy(rubric, "lower"))[0] == "silver"
    assert assign_tier(0.895, 0.885, 0.905, _policy(rubric, "upper"))[0] == "gold"


# gelu_sum's thread_per_output.cu on one H100, two grades: 0.7506 and 0.7470, each interval straddling or
# just under the silver line (0.75); a scalar bias_gelu_fused kernel on either side of the gold line.
ON_THE_SILVER_LINE = [(0.7506, 0.7456, 0.7528), (0.7470, 0.7451, 0.7489), (0.7503, 0.7479, 0.7550),
                      (0.7420, 0.7355, 0.7478), (0.7310, 0.7287, 0.7375)]
ON_THE_GOLD_LINE = [(0.8970, 0.8935, 0.9004), (0.9010, 0.8990, 0.9040), (0.8800, 0.8760, 0.8850)]


@pytest.mark.parametrize("policy", ["benefit", "median"])
def test_a_kernel_on_a_line_gets_one_tier_from_either_side_of_it(rubric, policy):
    """The benefit policy gives every run of a kernel on a line the
    line's tier, whichever side of it the median fell; the median policy gives two tiers."""
    tiers = {assign_tier(*run, _policy(rubric, policy))[0] for run in ON_THE_SILVER_LINE}
    gold = {assign_tier(*run, _policy(rubric, policy))[0] for run in ON_THE_GOLD_LINE}
    if policy == "benefit":
        assert tiers == {"silver"} and gold == {"gold"}
    else:
        assert tiers == {"silver", "below"} and gold == {"silver", "gold"}
    assert all(assign_tier(*run, _policy(rubric, policy))[1] for run in ON_THE_SILVER_LINE + ON_THE_GOLD_LINE)


def test_benefit_decides_from_the_interval_not_where_the_point_falls_in_the_band(rubric):
    r = _policy(rubric, "benefit")
    # the same upper end, the median anywhere below it in the band: the same tier
    assert {assign_tier(m, m - 0.01, 0.735, r)[0] for m in (0.7255, 0.728, 0.732)} == {"silver"}
    # clear of the band (0.97 x 0.75 = 0.7275): below, and not borderline
    assert assign_tier(0.715, 0.710, 0.720, r)[:2] == ("below", False)
    # far above a line, not borderline; in the band above it, borderline and the same tier
    assert assign_tier(0.82, 0.815, 0.825, r)[:2] == ("silver", False)
    assert assign_tier(0.765, 0.76, 0.77, r)[:2] == ("silver", True)
    # a narrower band is the rubric's choice: the same interval is then below
    assert assign_tier(0.728, 0.72, 0.735, _policy(rubric, "benefit", borderline_band=0.01))[0] == "below"


def test_the_shipped_rubrics_grade_the_median_until_benefit_is_measured_on_a_gpu():
    """benefit moves where a tier changes (0.97 of each line): the samples' manifests are checked
    against it on a GPU before a shipped rubric takes it; until then they grade the median."""
    from grader.exercises.rubric import load_rubric

    for path in sorted(Path(__file__).parent.parent.joinpath("rubrics").glob("*.yaml")):
        tiers = load_rubric(path).tiers
        assert (tiers.borderline_policy, tiers.borderline_band) == ("median", 0.03), path.name
        assert tiers.decision_lines() == pytest.approx([tiers.silver, tiers.gold])
        benefit = dataclasses.replace(tiers, borderline_policy="benefit")
        assert benefit.decision_lines() == pytest.approx([tiers.silver * 0.97, tiers.gold * 0.97])


def test_a_band_that_reaches_the_next_line_is_refused(tmp_path):
    from grader.core.errors import RubricError
    from grader.exercises.rubric import load_rubric

    text = Path(__file__).parent.parent.joinpath("rubrics", "gelu_sum.yaml").read_text()
    bad = tmp_path / "gelu_sum.yaml"
    bad.write_text(text.replace("borderline_band: 0.03", "borderline_band: 0.1"))
    with pytest.raises(RubricError, match="borderline_band"):
        load_rubric(bad)


def test_above_the_floor_beyond_noise_is_flagged_and_never_gold(rubric):
    tier, _, flags = assign_tier(1.3, 1.25, 1.35, rubric)
    assert flags == ["exceeds_copy_floor"] and tier != "gold"
    tier, _, flags = assign_tier(1.002, 0.99, 1.01, rubric)     # within the noise: fine
    assert flags == [] and tier == "gold"
    # A kernel that moves what a copy moves, measured in a process whose buffers lay better than the
    # copies' (an H100 batch: 1.0064, the interval clear of 1.0): the placement noise the interval
    # does not see, not skipped work. It is gold, unflagged, up to the rubric's margin.
    assert assign_tier(1.0064, 1.002, 1.011, rubric) == ("gold", False, [])
    assert assign_tier(1.028, 1.0251, 1.0299, rubric) == ("gold", False, [])
    tier, _, flags = assign_tier(1.036, 1.0301, 1.04, rubric)
    assert flags == ["exceeds_copy_floor"] and tier == "below"
    strict = dataclasses.replace(rubric, tiers=dataclasses.replace(rubric.tiers, exceeds_floor_margin=0.0))
    assert assign_tier(1.0064, 1.002, 1.011, strict)[2] == ["exceeds_copy_floor"]
