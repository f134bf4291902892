"""What made the slow kernels slow: the class's insights (report_dir/insights.json), from the
students' results alone.

- For each speed finding (what the compiled code shows, and with `--counters` what the hardware
  counted): how many correct, timed kernels have it (an incorrect kernel's speed means nothing, and
  an untimed one has none: neither is counted), the median fraction of those against that of the
  correct, timed kernels without it, and one student's line as the example (the slowest).
- For the correct kernels the counters' pass read: the class's spread of DRAM throughput and of
  sectors per request (loads and stores), each student's value kept.
- Each named mistake (a diagnosis) with the students who made it, each linked to their report.

Built from (student, Result, report link) alone, so a test recounts it from results.jsonl; class.html,
the end of `grader batch`'s output and the GitHub job summary show it. docs/insights-json.md lists
every key (scripts/docs.py makes it from the dataclasses here).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

from grader.core import atomic
from grader.core.outcomes import Outcome
from grader.core.results import Result

SCHEMA = "grader.insights/1"
INSIGHTS_NAME = "insights.json"


@dataclass
class Example:
    """One student who has a finding, as the class report shows them."""

    student: str                    # the student's name in the batch
    fraction: float | None          # their fraction of the copy floor (None: not correct or not timed)
    line: str                       # the finding's first line, and its first piece of evidence
    report: str = ""                # their report.html, relative to class.html ("" when there is none)


@dataclass
class FindingInsight:
    """A speed finding across the class."""

    code: str                       # the rubric's finding code (div64, scalar_loads, uncoalesced, ...)
    source: str                     # code (the compiled kernel, its launches) or counters (Nsight Compute)
    students: list[str]             # every student whose correct, timed kernel has it, by name
    timed: int                      # how many those are (the medians are over them)
    median_with: float | None       # their median fraction
    median_without: float | None    # the median fraction of the correct, timed kernels without it
    example: Example | None         # the slowest timed student with it (else the first by name)


@dataclass
class Spread:
    """One counter over the correct kernels the counters' pass read (the kernel that took longest
    in each student's timed call)."""

    metric: str                     # the KernelCounters field: dram_gbps, dram_pct, load_sectors_per_request, ...
    unit: str                       # GB/s, %, sectors
    students: int                   # how many students have a value
    low: float                      # the smallest
    median: float
    high: float                     # the largest
    values: dict[str, float] = field(default_factory=dict)    # student -> value


@dataclass
class MistakeInsight:
    """A named mistake (a diagnosis code) and the students whose grade has it."""

    code: str
    students: list[str]
    reports: dict[str, str] = field(default_factory=dict)     # student -> report link ("" when none)


@dataclass
class ClassInsights:
    """report_dir/insights.json."""

    schema: str                     # grader.insights/1
    students: int                   # every student the batch lists
    correct_timed: int              # correct kernels with a fraction (the findings' medians are over these)
    with_counters: int              # correct kernels the counters' pass read (`grader batch --counters`)
    findings: list[FindingInsight] = field(default_factory=list)   # most students first
    spreads: list[Spread] = field(default_factory=list)            # with --counters: DRAM, sectors per request
    mistakes: list[MistakeInsight] = field(default_factory=list)   # most students first


# The counters shown as the class's spread: (field of KernelCounters, unit)
SPREADS = (("dram_gbps", "GB/s"), ("dram_pct", "% of peak"), ("load_sectors_per_request", "sectors"),
           ("store_sectors_per_request", "sectors"))


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 4) if values else None


def _timed(r: Result | None) -> bool:
    return r is not None and r.status == Outcome.GRADED and bool(r.correct) and r.fraction is not None


def gather(rows: list[tuple[str, Result | None, str]], students: int | None = None) -> ClassInsights:
    """The insights of rows (student, their Result or None where not graded, their report link)."""
    timed = {who: r.fraction for who, r, _ in rows if _timed(r)}
    links = {who: link for who, _, link in rows}
    counted: dict[str, object] = {}
    for who, r, _ in rows:
        if _timed(r) and r.counters is not None and r.counters.kernels:
            counted[who] = max(r.counters.kernels, key=lambda k: k.duration_us)
    return ClassInsights(SCHEMA, len(rows) if students is None else students, len(timed), len(counted),
                         _findings(rows, timed, links), _spreads(counted), _mistakes(rows, links))


def _findings(rows: list[tuple[str, Result | None, str]], timed: dict[str, float],
              links: dict[str, str]) -> list[FindingInsight]:
    """Each speed finding of the correct, timed kernels, most students first."""
    found: dict[tuple[str, str], list[tuple[str, object]]] = {}
    for who, r, _ in rows:
        if not _timed(r):                   # only correct, timed kernels: slow has a meaning for them alone
            continue
        seen = set()
        for f in r.findings:
            if (f.code, f.source) not in seen:            # a finding of two kernels counts its student once
                seen.add((f.code, f.source))
                found.setdefault((f.code, f.source), []).append((who, f))
    findings = []
    for (code, source), have in found.items():
        names = sorted(who for who, _ in have)
        with_ = [timed[w] for w in names if w in timed]
        without = [v for w, v in timed.items() if w not in set(names)]
        ranked = sorted(have, key=lambda h: (timed.get(h[0], float("inf")), h[0]))
        who, f = ranked[0]
        line = f.message.strip().splitlines()[0] if f.message.strip() else code
        if f.evidence:
            line += f" ({f.evidence[0]})"
        findings.append(FindingInsight(code, source, names, len(with_), _median(with_), _median(without),
                                       Example(who, timed.get(who), line, links.get(who, ""))))
    findings.sort(key=lambda fi: (-len(fi.students), fi.code, fi.source))
    return findings


def _spreads(counted: dict[str, object]) -> list[Spread]:
    """The class's spread of each counter, over the kernels the counters' pass read."""
    spreads = []
    for metric, unit in SPREADS:
        values = {who: float(getattr(k, metric)) for who, k in sorted(counted.items())
                  if getattr(k, metric) is not None}
        if values:
            v = sorted(values.values())
            spreads.append(Spread(metric, unit, len(v), round(v[0], 4), round(statistics.median(v), 4),
                                  round(v[-1], 4), {w: round(x, 4) for w, x in values.items()}))
    return spreads


def _mistakes(rows: list[tuple[str, Result | None, str]], links: dict[str, str]) -> list[MistakeInsight]:
    """Each named mistake with the students who made it, most students first."""
    made: dict[str, list[str]] = {}
    for who, r, _ in rows:
        if r is not None and r.status == Outcome.GRADED:
            for code in dict.fromkeys(d.code for d in r.diagnosis):
                made.setdefault(code, []).append(who)
    return [MistakeInsight(code, sorted(who), {w: links.get(w, "") for w in sorted(who)})
            for code, who in sorted(made.items(), key=lambda kv: (-len(kv[1]), kv[0]))]


def write_insights(insights: ClassInsights, path: Path) -> None:
    atomic.replace_text(path, json.dumps(asdict(insights), indent=1) + "\n")


def _fraction(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _cut(line: str, width: int) -> str:
    return line if len(line) <= width else line[: width - 3].rstrip() + "..."


def terminal_lines(ins: ClassInsights, *, findings: int = 5, width: int = 80) -> list[str]:
    """A few lines for the end of `grader batch`, each at most width columns (an example's line cut:
    class.html and insights.json have it whole); none where no correct kernel was timed (the
    emulator's batch: each student's report lists their own kernel's findings)."""
    if not ins.findings and not ins.spreads:
        return []
    lines = [f"What made the slow kernels slow ({ins.correct_timed} correct kernels timed):"]
    for fi in ins.findings[:findings]:
        lines.append(_cut(f"  {fi.code}: {len(fi.students)} student(s), median fraction {_fraction(fi.median_with)} "
                          f"against {_fraction(fi.median_without)} without", width))
        if fi.example is not None:
            lines.append(_cut(f"    e.g. {fi.example.student}: {fi.example.line}", width))
    if len(ins.findings) > findings:
        lines.append(f"  and {len(ins.findings) - findings} more finding(s): class.html, insights.json")
    for s in ins.spreads[:2]:
        lines.append(f"  {s.metric} over {s.students} correct kernel(s): {s.low:g} to {s.high:g} {s.unit}, "
                     f"median {s.median:g}")
    return lines


def markdown(ins: ClassInsights) -> str:
    """The insights as Markdown, for the GitHub job summary."""
    out = [f"### What made the slow kernels slow\n\n{ins.correct_timed} correct kernels timed"
           + (f", {ins.with_counters} with the hardware's counters" if ins.with_counters else "") + ".\n"]
    if ins.findings:
        out.append("| finding | students | median fraction with | without | example |\n| --- | --- | --- | --- | --- |")
        for fi in ins.findings:
            ex = f"{fi.example.student}: {fi.example.line}".replace("|", "\\|") if fi.example else ""
            out.append(f"| {fi.code} ({fi.source}) | {len(fi.students)} | {_fraction(fi.median_with)} | "
                       f"{_fraction(fi.median_without)} | {ex} |")
        out.append("")
    if ins.spreads:
        out.append("| counter | students | lowest | median | highest |\n| --- | --- | --- | --- | --- |")
        out += [f"| {s.metric} ({s.unit}) | {s.students} | {s.low:g} | {s.median:g} | {s.high:g} |" for s in ins.spreads]
        out.append("")
    if ins.mistakes:
        out.append("| mistake | students |\n| --- | --- |")
        out += [f"| {m.code} | {', '.join(m.students)} |" for m in ins.mistakes]
    return "\n".join(out) + "\n"
