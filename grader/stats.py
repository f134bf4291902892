"""Medians and the bootstrap interval of the graded fraction."""

from __future__ import annotations

from dataclasses import dataclass

import torch


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
    return float(torch.tensor(values, dtype=torch.float64).median())


def fraction_interval(floor_times: list[float], sub_times: list[float], *, resamples: int = 1000,
                      seed: int = 0) -> Interval:
    """95% bootstrap interval of median(floor) / median(submission), resampling paired rounds.

    The samples are paired: round i timed the floor and the submission back to
    back, so a round is resampled as a whole and drifts common to both cancel.
    """
    f = torch.tensor(floor_times, dtype=torch.float64)
    s = torch.tensor(sub_times, dtype=torch.float64)
    if f.numel() != s.numel() or f.numel() == 0:
        raise ValueError("need the same, non-zero number of floor and submission samples")
    point = float(f.median() / s.median())
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, f.numel(), (resamples, f.numel()), generator=g)
    ratios = f[idx].median(dim=1).values / s[idx].median(dim=1).values
    low, high = torch.quantile(ratios, torch.tensor([0.025, 0.975], dtype=torch.float64)).tolist()
    return Interval(point, float(low), float(high))
