"""Comparing an output with its float64 reference, and reading the guard regions.

Before every run the output is filled with POISON (a NaN with a payload no
arithmetic produces) and the guard regions on both sides with GUARD, so an
unwritten element and an out-of-bounds write can be told apart from a wrong
value afterwards, bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

POISON_BITS = 0x7FC0DEAD      # a quiet NaN with a payload
GUARD_BITS = 0x5A5A5A5A       # about 1.5e16, a finite value no GELU of these inputs produces


def bits_tensor(value_bits: int, n: int) -> torch.Tensor:
    return torch.full((n,), value_bits, dtype=torch.int32).view(torch.float32)


@dataclass
class Mismatch:
    index: list[int]          # the element's index, outermost dimension first
    got: float
    want: float


@dataclass
class Comparison:
    passed: bool
    total: int
    bad: int
    unwritten: int
    first: Mismatch | None
    max_abs_error: float
    max_rel_error: float          # over the elements that were written and are finite


@dataclass
class Prepared:
    """A reference made ready for a fast check (computed while the child runs).

    want32 is the float64 reference rounded to float32, and limit32 the tolerance
    atol + rtol*|want| shrunk by 1% and rounded down: the float32 rounding of want and of
    the difference is far below 1% of the tolerance, so an element within limit32 in
    float32 is certainly within the tolerance in float64.
    """

    want32: torch.Tensor
    limit32: torch.Tensor


def prepare(want: torch.Tensor, *, rtol: float, atol: float) -> Prepared:
    limit = want.abs().mul_(rtol).add_(atol).mul_(0.99).float()
    return Prepared(want.float(), limit)


def unwritten_mask(got: torch.Tensor, want: torch.Tensor, init: str = "poison", atol: float = 0.0) -> torch.Tensor:
    """Elements the kernel never wrote: still the poison; or, for an output that starts at zero
    (an accumulator), still exactly zero where the answer is clearly not."""
    raw = got.contiguous().view(torch.int32)
    if init == "zero":
        return (raw == 0) & (want.abs() > 10 * atol)
    return raw == POISON_BITS


def compare(got: torch.Tensor, want: torch.Tensor, *, rtol: float, atol: float,
            prepared: Prepared | None = None, init: str = "poison") -> Comparison:
    """got: float32; want: float64 of the same shape (any number of dimensions). With prepared, a float32 pass
    settles the usual case (every element clearly within tolerance); anything else is
    decided by the exact float64 comparison."""
    if prepared is not None:
        diff32 = (got - prepared.want32).abs_()
        if bool((diff32 <= prepared.limit32).all()):
            return Comparison(passed=True, total=got.numel(), bad=0, unwritten=0, first=None,
                              max_abs_error=float(diff32.max()) if diff32.numel() else 0.0, max_rel_error=0.0)
    unwritten = unwritten_mask(got, want, init, atol)
    diff = got.double().sub_(want).abs_()
    bad_mask = ~(diff <= want.abs().mul_(rtol).add_(atol))     # NaN (unwritten too) is never <=
    bad = int(bad_mask.sum())
    first = None
    max_rel = 0.0
    if bad:
        flat = torch.nonzero(bad_mask.flatten(), as_tuple=False).flatten()
        index, rest = [], int(flat[0])
        for extent in reversed(want.shape):
            rest, i = divmod(rest, extent)
            index.insert(0, i)
        first = Mismatch(index, float(got[tuple(index)]), float(want[tuple(index)]))
        # the worst relative error is reached at a bad element
        d, w = diff.flatten()[flat], want.flatten()[flat].abs().clamp_min(atol)
        rel = d / w
        rel = rel[torch.isfinite(rel)]
        max_rel = float(rel.max()) if rel.numel() else float("inf")
    max_abs = float(torch.nan_to_num(diff, nan=0.0, posinf=0.0).max()) if diff.numel() else 0.0
    return Comparison(passed=bad == 0, total=got.numel(), bad=bad, unwritten=int(unwritten.sum()),
                      first=first, max_abs_error=max_abs, max_rel_error=max_rel)


@dataclass
class GuardDamage:
    before: int            # guard elements changed before the output
    after: int             # guard elements changed after it
    farthest_after: int    # how many floats past the end the farthest changed one is (0 if none)

    @property
    def damaged(self) -> bool:
        return bool(self.before or self.after)


def read_guards(full: torch.Tensor, pad: int, n: int) -> GuardDamage:
    """full = [pad guard floats][n output floats][pad guard floats], as a float32 tensor."""
    raw = full.contiguous().view(torch.int32)
    before = raw[:pad] != GUARD_BITS
    after = raw[pad + n :] != GUARD_BITS
    far = int(torch.nonzero(after)[-1]) + 1 if bool(after.any()) else 0
    return GuardDamage(before=int(before.sum()), after=int(after.sum()), farthest_after=far)
