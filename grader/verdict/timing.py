"""The timing frames into medians, the fraction of the floor with its interval, the speedup over
an exercise's PyTorch baseline, and the tier."""

from __future__ import annotations

from dataclasses import dataclass

from grader.core import exprs
from grader.core.contract import BaselineTimingFrame, TimingFrame
from grader.core.outcomes import Tier
from grader.core.results import BaselineTiming, CopyTiming, TimingResult
from grader.core.stats import fraction_interval, median
from grader.exercises.plan import baseline_cases
from grader.exercises.rubric import Rubric, dims_values
from grader.verdict.tiers import assign_tier


def judge_timing(frame: TimingFrame, rubric: Rubric, baseline_frames: list[BaselineTimingFrame]) -> TimingResult:
    """The timed samples as medians, the fraction of the floor with its interval, the chain and the
    speedup over the baseline."""
    t = rubric.timing
    samples: dict[str, list[float]] = frame.samples_ms
    values = dims_values(rubric, t.dims)
    nbytes = int(exprs.evaluate(t.bytes, values))
    copy_bytes = 8 * int(exprs.evaluate(t.copy_floats, values))

    def gbps(ms: float, moved: int) -> float:
        return moved / (ms * 1e-3) / 1e9

    copies = [CopyTiming(k, median(samples[k]), gbps(median(samples[k]), copy_bytes), copy_bytes) for k in samples
              if k not in ("submission", "chain")]
    floor = min((c for c in copies if c.kind in t.floor), key=lambda c: c.median_ms)
    sub_ms = median(samples["submission"])
    interval = fraction_interval(samples[floor.kind], samples["submission"], resamples=t.bootstrap)
    info = next(c for c in copies if c.kind == t.informational_floor)
    chain_ms = median(samples["chain"]) if samples.get("chain") else None
    chain_bytes = int(exprs.evaluate(t.chain_bytes, values)) if t.chain_bytes else None
    # The fraction is a ratio of bandwidths, each on its own byte count: the ratio of the
    # times scaled by the ratio of the bytes.
    scale = nbytes / copy_bytes
    timing = TimingResult(
        shape=list(t.dims.values()), kernel=rubric.kernel.name, byte_model=t.byte_model, bytes_moved=nbytes,
        samples=len(samples["submission"]), stop_reason=frame.stop_reason, seconds=frame.seconds,
        submission_ms=sub_ms, submission_gbps=gbps(sub_ms, nbytes), floor_kind=floor.kind, floor_gbps=floor.gbps,
        copies=copies, fraction=interval.median * scale, fraction_ci=[interval.low * scale, interval.high * scale],
        informational_kind=info.kind, informational_fraction=info.median_ms / sub_ms * scale,
        chain_ms=chain_ms, chain_gbps=gbps(chain_ms, chain_bytes) if chain_ms and chain_bytes else None,
        chain_bytes=chain_bytes, chain_title=rubric.chain.title, baseline=t.baseline,
        baseline_max_abs_diff=frame.baseline_max_abs_diff, holds_timed_out=frame.holds_timed_out,
    )
    if samples.get("baseline"):
        timing.baselines.append(_against(list(t.dims.values()), samples))
    shapes = {c.name: list(c.dims.values()) for c in baseline_cases(rubric)}
    for h in baseline_frames:
        if h.case in shapes and h.samples_ms.get("baseline"):
            timing.baselines.append(_against(shapes[h.case], h.samples_ms))
    return timing


def _against(shape: list[int], samples: dict) -> BaselineTiming:
    sub, base = median(samples["submission"]), median(samples["baseline"])
    return BaselineTiming(shape, sub, base, base / sub)


@dataclass
class GivenTier:
    """A correct, timed kernel's tier, whether its interval reaches a line's band, and what it is told."""

    tier: Tier
    borderline: bool
    flags: list[str]
    feedback: str


def give_tier(timing: TimingResult, rubric: Rubric) -> GivenTier:
    """The tier of a correct, timed kernel, and what to tell the student about it."""
    tier, borderline, flags = assign_tier(timing.fraction, *timing.fraction_ci, rubric)
    text = rubric.feedback.tiers.get(tier, "")
    if "exceeds_copy_floor" in flags:
        text = (f"Measured faster than the best copy of the same bytes (interval {timing.fraction_ci[0]:.3f} to "
                f"{timing.fraction_ci[1]:.3f}): a kernel that reads and writes what a copy does cannot beat it, "
                "so this is skipped work, caching or a timing escape, and it gets no gold. " + text)
    return GivenTier(tier, borderline, list(flags), text)
