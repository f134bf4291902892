"""The class report: one HTML page that shows how a class did (report_dir/class.html).

Tier counts, a table of every student (outcome, tier, fraction, diagnosis; sortable by each, each
row linked to that student's report.html), a histogram of the correct kernels' fractions with the
tier lines, each GPU's floor, the class's insights (batch/insights.py: the named mistakes and the
speed findings with the students who have them, linked), the similar kernels (batch/similarity.py:
the pairs ranked by score, each with its matching regions side by side), and the submissions that
were not graded with why. The numbers are gathered here into a small typed object; the page is a
template.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from grader.batch.grading import Graded
from grader.batch.insights import INSIGHTS_NAME, ClassInsights, gather, write_insights
from grader.batch.similarity import Similarity, class_similarity
from grader.core import atomic
from grader.core.outcomes import Tier
from grader.exercises.rubric import Rubric
from grader.platforms.scoring import first_line
from grader.toolchain.render import render

BIN = 0.05          # histogram bin width, in fractions of the floor


@dataclass
class Bar:
    low: float
    count: int
    students: list[str]


@dataclass
class StudentRow:
    student: str
    outcome: str                 # gold, silver, below, correct untimed, incorrect, or why not graded
    rank: int                    # the outcome's order, best first (what sorting by outcome uses)
    tier: str
    fraction: float | None
    named: str                   # the diagnoses' codes
    report: str                  # the student's report.html, relative to class.html, as a URL ("" when none)


OUTCOME_ORDER = [*Tier, "correct", "incorrect"]     # the tiers, then the rows beside them


@dataclass
class ClassSummary:
    title: str
    students: int
    by_outcome: list[tuple[str, int]]            # gold, silver, below, incorrect, and each status not graded
    bars: list[Bar]
    bar_max: int
    gold: float
    silver: float
    floors: list[tuple[str, float]]              # (GPU, the median floor GB/s its results measured)
    not_graded: list[tuple[str, str, str]] = field(default_factory=list)   # (student, status, first line)
    identical: list[list[str]] = field(default_factory=list)   # groups of students who handed in the same bytes
    unconfined: list[str] = field(default_factory=list)        # students whose code read unconfined (no Landlock)
    rows: list[StudentRow] = field(default_factory=list)                     # every student, by name
    insights: ClassInsights | None = None        # what made the slow kernels slow (batch/insights.py)
    similarity: Similarity | None = None         # the similar kernels (batch/similarity.py)
    reports: dict[str, str] = field(default_factory=dict)   # each student's report.html as a URL, where there is one


def css_class(outcome: str) -> str:
    """An outcome as an HTML class name: gold, incorrect, correct, compile-error (its
    letters and digits, runs of anything else one hyphen)."""
    return re.sub(r"[^a-z0-9]+", "-", outcome.lower()).strip("-") or "none"


def _row(g: Graded, outcome: str, folder: Path | None) -> StudentRow:
    r = g.result
    report = folder / g.entry.student / "report.html" if folder is not None else None
    rank = OUTCOME_ORDER.index(outcome) if outcome in OUTCOME_ORDER else len(OUTCOME_ORDER)
    return StudentRow(g.entry.student, outcome, rank, (r.tier if r and r.correct and r.tier else ""),
                      r.fraction if r is not None and r.correct else None,
                      ", ".join(d.code for d in r.diagnosis) if r is not None else "",
                      quote(f"{g.entry.student}/report.html", errors="surrogateescape")
                      if report is not None and report.is_file() else "")


def summarise(graded: list[Graded], rubric: Rubric, folder: Path | None = None) -> ClassSummary:
    """folder: where class.html goes, beside each student's folder of reports (for the links)."""
    outcomes: Counter = Counter()
    fractions: list[tuple[float, str]] = []
    floors: dict[str, list[float]] = {}
    not_graded = []
    rows = []
    identical: dict[str, list[str]] = {}
    unconfined = []
    for g in graded:
        r, who = g.result, g.entry.student
        if g.entry.identical_to:
            identical.setdefault(g.entry.sha256, []).append(who)
        if r is not None and r.sandbox is not None and r.sandbox.unconfined_reads():
            unconfined.append(who)
        if r is None:
            outcomes[g.entry.problem] += 1
            not_graded.append((who, g.entry.problem, first_line(g.entry.detail)))
            rows.append(_row(g, g.entry.problem, folder))
            continue
        outcome = r.word
        outcomes[outcome] += 1
        if not r.graded:
            not_graded.append((who, outcome, first_line(r.message)))
            rows.append(_row(g, outcome, folder))
            continue
        rows.append(_row(g, outcome, folder))
        if r.fraction is not None and r.correct:          # an incorrect kernel's speed means nothing
            fractions.append((r.fraction, who))
        if r.floor is not None and r.floor.gbps:
            floors.setdefault(r.device.name or "GPU", []).append(r.floor.gbps)
    top = max((f for f, _ in fractions), default=1.0)
    bins = int(min(max(top, 1.0), 2.0) / BIN) + 1
    bars = [Bar(round(i * BIN, 2), 0, []) for i in range(bins)]
    for f, who in fractions:
        bar = bars[min(int(f / BIN), bins - 1)]
        bar.count += 1
        bar.students.append(who)
    order = OUTCOME_ORDER
    by_outcome = sorted(outcomes.items(), key=lambda kv: (order.index(kv[0]) if kv[0] in order else len(order), kv[0]))
    return ClassSummary(
        title=rubric.title, students=len(graded), by_outcome=by_outcome, bars=bars,
        bar_max=max((b.count for b in bars), default=0) or 1, gold=rubric.tiers.gold, silver=rubric.tiers.silver,
        floors=[(gpu, sorted(v)[len(v) // 2]) for gpu, v in sorted(floors.items())],
        not_graded=not_graded,
        rows=sorted(rows, key=lambda row: row.student), identical=sorted(sorted(g) for g in identical.values()),
        unconfined=sorted(unconfined))


def class_insights(graded: list[Graded], folder: Path | None = None) -> ClassInsights:
    """The class's insights (batch/insights.py), each student linked to their report in folder."""
    def link(g: Graded) -> str:
        report = folder / g.entry.student / "report.html" if folder is not None else None
        return (quote(f"{g.entry.student}/report.html", errors="surrogateescape")
                if report is not None and report.is_file() else "")

    return gather([(g.entry.student, g.result, link(g)) for g in graded])


def write_class_report(graded: list[Graded], rubric: Rubric, path: Path, *,
                       similarity: Similarity | None = None) -> ClassSummary:
    """class.html at path, and insights.json beside it; similarity: the class's similar kernels
    (None: found here, at the default threshold)."""
    summary = summarise(graded, rubric, path.parent)
    summary.insights = class_insights(graded, path.parent)
    summary.similarity = similarity if similarity is not None else class_similarity(graded, rubric=rubric)
    summary.reports = {row.student: row.report for row in summary.rows if row.report}
    write_insights(summary.insights, path.parent / INSIGHTS_NAME)
    atomic.replace_text(path, render("class.html.j2", s=summary, bin=BIN, css=css_class))
    return summary
