"""The correctness cases and the inputs each one uses.

Inputs are a pure function of the case (shape, pattern, seed), so the
parent process, which computes the float64 reference, and the child, which
runs the student's kernel, generate the same tensors without sending them
across the process boundary.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

import torch

from grader.rubric import Rubric

Pattern = Literal["lesson", "random"]


@dataclass(frozen=True)
class Case:
    name: str
    rows: int
    cols: int
    pattern: Pattern
    seed: int = 0
    chain: bool = False          # also run the reference addResidual after the submission
    timed: bool = False          # the timed shape's input set (verified after timing)

    @property
    def elements(self) -> int:
        return self.rows * self.cols

    def to_dict(self) -> dict:
        return asdict(self)


def plan_cases(rubric: Rubric) -> list[Case]:
    """The correctness cases, in the order they run (the lesson's shape first)."""
    s = rubric.checks.lesson_shape
    cases = [Case(f"lesson {s.rows}x{s.cols}", s.rows, s.cols, "lesson", chain=rubric.checks.chain)]
    shapes = list(rubric.checks.shapes)
    if all((sh.rows, sh.cols) != (s.rows, s.cols) for sh in shapes):
        shapes.append(s)                                  # the lesson's shape with random inputs too
    for shape in shapes:
        for seed in rubric.checks.seeds:
            cases.append(Case(f"random {shape.rows}x{shape.cols} seed {seed}", shape.rows, shape.cols, "random", seed))
    return cases


def timed_cases(rubric: Rubric) -> list[Case]:
    """One case per input set the timed launches rotate over."""
    s = rubric.timing.shape
    return [Case(f"timed {s.rows}x{s.cols} set {k}", s.rows, s.cols, "random", seed=1000 + k, timed=True)
            for k in range(rubric.timing.input_sets)]


def make_inputs(case: Case) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """x (rows x cols), bias (cols) and, for chain cases, the residual r: float32 on the CPU."""
    n, cols = case.elements, case.cols
    if case.pattern == "lesson":
        i = torch.arange(n, dtype=torch.int64)
        x = ((i % 53) - 26).to(torch.float32) * 0.1875
        c = torch.arange(cols, dtype=torch.int64)
        bias = ((c % 11) - 5).to(torch.float32) * 0.25
        r = ((i % 29) - 14).to(torch.float32) * 0.0625 if case.chain else None
        return x.view(case.rows, cols), bias, (r.view(case.rows, cols) if r is not None else None)
    g = torch.Generator().manual_seed(case.seed * 1_000_003 + case.rows * 7919 + cols)
    # Most values around GELU's knee (-3..1), a tenth spread over both tails.
    x = torch.randn(n, generator=g, dtype=torch.float32) * 2.0
    tails = torch.rand(n, generator=g) < 0.1
    x[tails] = (torch.rand(int(tails.sum()), generator=g) * 24.0 - 12.0)
    bias = torch.randn(cols, generator=g, dtype=torch.float32) * 0.5
    r = torch.randn(n, generator=g, dtype=torch.float32).view(case.rows, cols) if case.chain else None
    return x.view(case.rows, cols), bias, r
