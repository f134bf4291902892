"""Naming the mistake behind a wrong output.

The output is matched against what the usual wrong kernels compute (the
lesson's Pitfalls and the mistakes students make most): the tanh GELU, a
missing bias, a bias indexed by the row, the bias added after the GELU;
then unwritten rows, columns or elements, writes outside the output, and
values that are only slightly off.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from grader.checking import POISON_BITS, Comparison, GuardDamage
from grader.reference_math import mistakes


@dataclass
class Diagnosis:
    code: str
    message: str          # what was seen, specific to this output
    case: str = ""


def _ranges(indices: list[int]) -> str:
    out, start, prev = [], None, None
    for i in indices:
        if start is None:
            start = prev = i
        elif i == prev + 1:
            prev = i
        else:
            out.append(f"{start}" if start == prev else f"{start}..{prev}")
            start = prev = i
    if start is not None:
        out.append(f"{start}" if start == prev else f"{start}..{prev}")
    text = ", ".join(out[:6])
    return text + (", ..." if len(out) > 6 else "")


def diagnose(got: torch.Tensor, want: torch.Tensor, x: torch.Tensor, bias: torch.Tensor, cmp: Comparison,
             guards: GuardDamage, *, rtol: float, atol: float) -> list[Diagnosis]:
    found: list[Diagnosis] = []
    rows, cols = want.shape
    if guards.after:
        found.append(Diagnosis("writes_past_output",
                               f"{guards.after} guard floats after the output changed, the farthest "
                               f"{guards.farthest_after} floats past its end"))
    if guards.before:
        found.append(Diagnosis("writes_before_output", f"{guards.before} guard floats before the output changed"))
    if cmp.passed:
        return found

    unwritten = got.contiguous().view(torch.int32) == POISON_BITS
    if bool(unwritten.any()):
        full_rows = [int(r) for r in torch.nonzero(unwritten.all(dim=1)).flatten()]
        full_cols = [int(c) for c in torch.nonzero(unwritten.all(dim=0)).flatten()]
        if full_rows:
            found.append(Diagnosis("unwritten_rows", f"{len(full_rows)} of {rows} rows never written (rows {_ranges(full_rows)})"))
        if full_cols:
            found.append(Diagnosis("unwritten_cols", f"{len(full_cols)} of {cols} columns never written (columns {_ranges(full_cols)})"))
        if not full_rows and not full_cols:
            found.append(Diagnosis("unwritten_elements", f"{int(unwritten.sum())} of {rows * cols} elements never written"))

    written = ~unwritten
    g = got.double()
    for code, (alt, mask) in mistakes(x, bias).items():
        region = written if mask is None else written & mask
        n = int(region.sum())
        if n == 0:
            continue
        close = ((g - alt).abs() <= 4 * (atol + rtol * alt.abs())) & region
        matches_alt = int(close.sum())
        matches_ref = int((((g - want).abs() <= atol + rtol * want.abs()) & region).sum())
        # The mistake explains the output if it matches (almost) everywhere it is defined
        # and explains more than the right answer does.
        if matches_alt >= 0.98 * n and matches_alt > matches_ref:
            found.append(Diagnosis(code, f"{matches_alt} of {n} written elements match this mistake within tolerance"))
            break

    if not any(d.code in ("tanh_gelu", "bias_missing", "bias_after_gelu", "bias_by_row") for d in found):
        nan_where_finite = torch.isnan(g) & written & torch.isfinite(want)
        if bool(nan_where_finite.any()) or bool(torch.isinf(g).any()):
            found.append(Diagnosis("nan_output", f"{int(nan_where_finite.sum())} elements are NaN or infinite where the reference is finite"))
        elif written.all() and cmp.max_rel_error < 1e-3:
            found.append(Diagnosis("near_miss", f"largest relative error {cmp.max_rel_error:.2e}, above the tolerance"))
        elif not any(d.code.startswith(("unwritten", "writes_")) for d in found):
            found.append(Diagnosis("wrong_values", f"{cmp.bad} of {cmp.total} elements wrong"))
    return found
