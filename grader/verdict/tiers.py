"""The tier of a correct kernel, from its fraction of the floor and the interval around it."""

from __future__ import annotations

from grader.core.outcomes import Tier
from grader.exercises.rubric import Rubric


def assign_tier(fraction: float, low: float, high: float, rubric: Rubric) -> tuple[Tier, bool, list[str]]:
    """(tier, borderline, flags) for a correct kernel's fraction and its 95% interval.

    borderline: the interval reaches into the band around a line (borderline_band of the line either
    side). Under the benefit policy the tier is the highest whose band the interval's upper end
    reaches, so a kernel on a line gets the line's tier on every run however its interval moves
    within the band; the other policies compare one point (median, lower or upper end) to the line."""
    tiers = rubric.tiers
    if low > 1.0 + tiers.exceeds_floor_margin:      # beyond the noise one process's interval does not see
        return Tier(tiers.exceeds_floor_tier), False, ["exceeds_copy_floor"]
    band = tiers.borderline_band
    borderline = any(low < line * (1 + band) and high >= line * (1 - band) for line in (tiers.gold, tiers.silver))
    value = {"benefit": high, "median": fraction, "lower": low, "upper": high}[tiers.borderline_policy]
    silver_at, gold_at = tiers.decision_lines()
    tier = Tier.GOLD if value >= gold_at else Tier.SILVER if value >= silver_at else Tier.BELOW
    return tier, borderline, []
