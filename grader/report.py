"""Rendering a Result: terminal summary, Markdown, HTML (with an inline SVG chart), result.json."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from rich.markup import escape

from grader.render import environment, render
from grader.results import STATUS_TEXT, Result
from grader.rubric import Rubric


environment().filters["esc"] = escape


@dataclass
class Bar:
    label: str
    value: float
    width: float
    y: float
    kind: str          # submission | floor | copy


def chart(result: Result, rubric: Rubric) -> dict | None:
    """Geometry of the bar chart: GB/s of the submission and each copy, with the tier lines."""
    t = result.timing
    if t is None:
        return None
    rows = [(f"{t.kernel} (yours)", t.submission_gbps, "submission")]
    rows += [(c.kind + (" (floor)" if c.kind == t.floor_kind else ""), c.gbps,
              "floor" if c.kind == t.floor_kind else "copy") for c in t.copies]
    top = max(v for _, v, _ in rows) * 1.1
    left, width, bar_h, gap = 190.0, 460.0, 26.0, 12.0
    bars = [Bar(label, value, width * value / top, 30 + i * (bar_h + gap), kind) for i, (label, value, kind) in enumerate(rows)]
    lines = [(name, left + width * frac * t.floor_gbps / top, frac)
             for name, frac in (("gold", rubric.tiers.gold), ("silver", rubric.tiers.silver))]
    height = 30 + len(rows) * (bar_h + gap) + 30
    return {"bars": bars, "lines": lines, "left": left, "width": width, "bar_h": bar_h, "height": height,
            "total_width": left + width + 90}


def notices(result: Result) -> list[str]:
    """What the reader must know about how this run was protected and measured."""
    found = []
    sb = result.sandbox
    if sb and not sb.get("seccomp"):
        found.append(f"The system-call filter was not in force here ({sb.get('seccomp_detail', 'unknown')}): the "
                     "submission ran with the other protections only (its own process group, resource limits, no "
                     "network where the grader runs as root). Set limits.require_seccomp to refuse to grade instead.")
    free, total = sb.get("gpu_memory_free_bytes"), sb.get("gpu_memory_total_bytes")
    if free is not None and total and free < 0.5 * total:
        found.append(f"Another process held {(total - free) / 2**30:.0f} GiB of this GPU's {total / 2**30:.0f} GiB "
                     "when this ran; its work may have disturbed the timing.")
    return found


def _context(result: Result, rubric: Rubric) -> dict:
    return {"r": result, "rubric": rubric, "status_text": STATUS_TEXT[result.status], "chart": chart(result, rubric),
            "notices": notices(result),
            "failed_cases": [c for c in result.cases if c.passed is False],
            "passed_count": sum(1 for c in result.cases if c.passed),
            "run_count": sum(1 for c in result.cases if c.passed is not None)}


def render_text(result: Result, rubric: Rubric) -> str:
    """The terminal summary, with rich markup (print it through a rich Console)."""
    return render("summary.txt.j2", **_context(result, rubric))


def render_markdown(result: Result, rubric: Rubric) -> str:
    return render("report.md.j2", **_context(result, rubric))


def render_html(result: Result, rubric: Rubric) -> str:
    return render("report.html.j2", **_context(result, rubric))


def render_json(result: Result) -> str:
    return json.dumps(result.to_json(), indent=2, sort_keys=False) + "\n"


def default_report_dir(file: Path) -> Path:
    """Where `grader submit FILE` writes its reports unless told: beside FILE, FILE's name with
    -report (kernel.cu: kernel-report/); under $GRADER_REPORTS_ROOT where that is set."""
    root = os.environ.get("GRADER_REPORTS_ROOT")
    name = f"{Path(file).stem}-report"
    return Path(root) / name if root else Path(file).parent / name


def write_reports(result: Result, rubric: Rubric, directory: Path) -> list[Path]:
    """report.md, report.html and result.json in directory (created if needed)."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in (("report.md", render_markdown(result, rubric)), ("report.html", render_html(result, rubric)),
                       ("result.json", render_json(result))):
        path = directory / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
