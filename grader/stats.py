"""Medians and the bootstrap interval of the graded fraction.

Plain Python: the child's stopping rule uses it too, and the child imports neither torch nor
numpy (a few hundred samples need neither).
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Interval:
    median: float
    low: float
    high: float

    @property
    def half_width(self) -> float:
        """Half the interval's width, relative to the median."""
        return (self.high - self.low) / 2 / self.median if self.median else float("inf")


def median(values: list[float]) -> float:
    """The lower median (an actual sample, as torch's median gives), of a non-empty list."""
    return float(statistics.median_low(values))


def quantile(values: list[float], q: float) -> float:
    """The q-quantile with linear interpolation between the closest ranks (numpy's and torch's default)."""
    s = sorted(values)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def fraction_interval(floor_times: list[float], sub_times: list[float], *, resamples: int = 1000,
                      seed: int = 0) -> Interval:
    """95% bootstrap interval of median(floor) / median(submission), resampling paired rounds.

    The samples are paired: round i timed the floor and the submission back to
    back, so a round is resampled as a whole and drifts common to both cancel.
    """
    n = len(floor_times)
    if n != len(sub_times) or n == 0:
        raise ValueError("need the same, non-zero number of floor and submission samples")
    point = median(floor_times) / median(sub_times)
    rng = random.Random(seed)
    ratios = []
    for _ in range(resamples):
        idx = [rng.randrange(n) for _ in range(n)]
        ratios.append(median([floor_times[i] for i in idx]) / median([sub_times[i] for i in idx]))
    return Interval(point, quantile(ratios, 0.025), quantile(ratios, 0.975))
