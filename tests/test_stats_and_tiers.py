import dataclasses

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


@pytest.mark.parametrize("frac, low, high, tier, borderline", [
    (0.95, 0.94, 0.96, "gold", False),
    (0.90, 0.895, 0.905, "gold", True),
    (0.89, 0.885, 0.905, "silver", True),
    (0.80, 0.79, 0.81, "silver", False),
    (0.70, 0.69, 0.71, "below", False),
])
def test_tiers_from_the_median(rubric, frac, low, high, tier, borderline):
    assert assign_tier(frac, low, high, rubric)[:2] == (tier, borderline)


def test_policy_lower_and_upper(rubric):
    lower = dataclasses.replace(rubric, tiers=dataclasses.replace(rubric.tiers, borderline_policy="lower"))
    upper = dataclasses.replace(rubric, tiers=dataclasses.replace(rubric.tiers, borderline_policy="upper"))
    assert assign_tier(0.905, 0.895, 0.915, lower, )[0] == "silver"
    assert assign_tier(0.895, 0.885, 0.905, upper)[0] == "gold"


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
