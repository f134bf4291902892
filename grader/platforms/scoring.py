"""Points from a Result, by the rubric's `points` section: the one scoring every platform shares."""

from __future__ import annotations

from dataclasses import dataclass

from grader.core.outcomes import Outcome
from grader.core.results import Result
from grader.exercises.rubric import Rubric


@dataclass(frozen=True)
class ScoreItem:
    """One rubric item: its points, its maximum, and pass, fail or error."""

    name: str
    score: float
    max_score: float
    status: str          # "pass" | "fail" | "error"
    message: str


@dataclass(frozen=True)
class Score:
    items: tuple[ScoreItem, ...]

    @property
    def total(self) -> float:
        return sum(i.score for i in self.items)

    @property
    def maximum(self) -> float:
        return sum(i.max_score for i in self.items)

    @property
    def status(self) -> str:
        if any(i.status == "error" for i in self.items):
            return "error"
        return "pass" if all(i.status == "pass" for i in self.items) else "fail"


def max_points(rubric: Rubric) -> float:
    """The most a submission can score: correctness, and the best tier where tiers give points."""
    return rubric.points.correct + max(rubric.points.tiers.values(), default=0.0)


def first_line(text: str) -> str:
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")


def score(result: Result, rubric: Rubric) -> Score:
    """Correctness, then the tier (an item only where the rubric gives tiers points)."""
    pts = rubric.points
    tier_max = max(pts.tiers.values(), default=0.0)
    items = []
    if result.status != Outcome.GRADED:
        detail = first_line(result.message)
        if result.notes:                      # the first place in the file beats a generic header line
            n = result.notes[0]
            detail = (f"line {n.line}: " if n.line else "") + n.message
        why = f"Not graded (the submission {Outcome(result.status).text}): {detail}"
        items.append(ScoreItem("correctness", 0.0, pts.correct, "error", why))
        if tier_max:
            items.append(ScoreItem("performance tier", 0.0, tier_max, "error", "not graded: " + why))
        return Score(tuple(items))
    checks = [c for c in result.cases if c.passed is not None]
    passed = sum(1 for c in checks if c.passed)
    if result.correct:
        items.append(ScoreItem("correctness", pts.correct, pts.correct, "pass",
                               f"all {len(checks)} checks pass against the float64 reference"))
    else:
        bad = next((c for c in result.cases if c.passed is False), None)
        codes = ", ".join(d.code for d in result.diagnosis)
        items.append(ScoreItem("correctness", 0.0, pts.correct, "fail",
                               f"{passed} of {len(checks)} checks pass" + (f"; first failing: {bad.name}" if bad else "")
                               + (f"; diagnosis: {codes}" if codes else "")))
    if tier_max:
        if not result.correct:
            items.append(ScoreItem("performance tier", 0.0, tier_max, "fail", "only a correct kernel gets a tier"))
        elif result.tier is None:
            items.append(ScoreItem("performance tier", 0.0, tier_max, "fail",
                                   "tiers are graded only on a GPU; this run checked correctness on the CPU emulator"))
        else:
            got = pts.tiers.get(result.tier, 0.0)
            frac = f"{result.fraction:.3f} of the copy floor" if result.fraction is not None else "not timed"
            items.append(ScoreItem("performance tier", got, tier_max, "pass" if got >= tier_max else "fail",
                                   f"{result.tier}: {frac}"))
    return Score(tuple(items))
