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


_MASK = 0xFFFFFFFF


def _hash(n: int, seed: int, stream: int, device: str | torch.device) -> torch.Tensor:
    """n 32-bit hashes (in int64) of (index, seed, stream), bit-identical on CPU and GPU.

    Wellons' two-multiply mixer with constants below 2^31, so every product fits in
    int64. Unlike torch's generators it does not change between versions or devices, so
    the child can draw the inputs on the GPU and the parent the same inputs on the CPU.
    """
    key = (seed * 0x5BD1E995 + stream * 0x27D4EB2F + 0x165667B1) & _MASK
    h = torch.arange(n, dtype=torch.int64, device=device).add_(key).bitwise_and_(_MASK)
    h.bitwise_xor_(h >> 16).mul_(0x21F0AAAD).bitwise_and_(_MASK)
    h.bitwise_xor_(h >> 15).mul_(0x735A2D97).bitwise_and_(_MASK)
    return h.bitwise_xor_(h >> 15)


def _unit(h: torch.Tensor) -> torch.Tensor:
    """The top 24 bits of a hash as an exact float in [0, 1)."""
    return (h >> 8).to(torch.float32).mul_(1.0 / (1 << 24))


def make_inputs(case: Case, device: str | torch.device = "cpu") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """x (rows x cols), bias (cols) and, for chain cases, the residual r, as float32 on device."""
    n, rows, cols = case.elements, case.rows, case.cols
    if case.pattern == "lesson":
        i = torch.arange(n, dtype=torch.int64, device=device)
        x = ((i % 53) - 26).to(torch.float32) * 0.1875
        c = torch.arange(cols, dtype=torch.int64, device=device)
        bias = ((c % 11) - 5).to(torch.float32) * 0.25
        r = ((i % 29) - 14).to(torch.float32) * 0.0625 if case.chain else None
    else:
        seed = case.seed * 7919 + rows * 31 + cols
        # Nine in ten values uniform over [-4, 4], GELU's knee and its neighbourhood; one in
        # ten (the hash's low byte below 26) over [-12, 12], both tails. Every float32
        # operation here is exact or correctly rounded, so CPU and GPU agree to the bit.
        h = _hash(n, seed, 0, device)
        u = _unit(h)
        x = torch.where((h & 0xFF) < 26, u * 24.0 - 12.0, u.mul_(8.0).sub_(4.0))
        bias = _unit(_hash(cols, seed, 1, device)).mul_(2.0).sub_(1.0)
        r = _unit(_hash(n, seed, 2, device)).mul_(4.0).sub_(2.0) if case.chain else None
    return x.view(rows, cols), bias, (r.view(rows, cols) if r is not None else None)
