"""The tier of a correct kernel, from its fraction of the floor and the interval around it."""

from __future__ import annotations

from grader.exercises.rubric import Rubric
from grader.core.outcomes import Tier


def assign_tier(fraction: float, low: float, high: float, rubric: Rubric) -> tuple[Tier, bool, list[str]]:
    """(tier, borderline, flags) for a correct kernel's fraction and its 95% interval."""
    tiers = rubric.tiers
    if low > 1.0 + tiers.exceeds_floor_margin:      # beyond the noise one process's interval does not see
        return Tier(tiers.exceeds_floor_tier), False, ["exceeds_copy_floor"]
    value = {"median": fraction, "lower": low, "upper": high}[tiers.borderline_policy]
    borderline = any(low < threshold <= high for threshold in (tiers.gold, tiers.silver))
    tier = Tier.GOLD if value >= tiers.gold else Tier.SILVER if value >= tiers.silver else Tier.BELOW
    return tier, borderline, []
