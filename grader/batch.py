"""Grading a folder of submissions, as an instructor does: one report each and a summary table."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Callable

from grader.grading import grade_submission
from grader.report import write_reports
from grader.results import Result
from grader.rubric import Rubric

SUMMARY_COLUMNS = ("file", "status", "correct", "tier", "borderline", "fraction", "fraction_low", "fraction_high",
                   "gbps", "diagnosis", "flags", "message", "seconds")


def grade_folder(directory: Path, *, rubric: Rubric, backend: str = "auto", report_dir: Path | None = None,
                 progress: Callable[[str], None] | None = None) -> list[tuple[Path, Result]]:
    """Grade every .cu file in directory (sorted by name); with report_dir, write each one's
    reports into report_dir/<file stem>/ and a summary.csv beside them."""
    results = []
    for path in sorted(directory.glob("*.cu")):
        if progress:
            progress(path.name)
        result = grade_submission(path, rubric=rubric, backend=backend)
        if report_dir is not None:
            write_reports(result, rubric, report_dir / path.stem)
        results.append((path, result))
    if report_dir is not None:
        write_summary(results, report_dir / "summary.csv")
        write_platform_exports(results, rubric, report_dir)
    return results


def write_platform_exports(results: list[tuple[Path, Result]], rubric: Rubric, report_dir: Path) -> None:
    """junit.xml (one testsuite per submission) and each submission's Gradescope results.json
    (report_dir/<stem>/gradescope.json), for CI dashboards and an upload per student."""
    import json

    from grader.platforms import gradescope, junit
    from grader.platforms.scoring import score
    from grader.report import render_markdown

    suites = [junit.testsuite(r, name=p.stem) for p, r in results]
    (report_dir / "junit.xml").write_bytes(junit.document(suites))
    for p, r in results:
        doc = gradescope.results(r, score(r, rubric), render_markdown(r, rubric))
        (report_dir / p.stem / "gradescope.json").write_text(json.dumps(doc, indent=1) + "\n")


def summary_row(path: Path, r: Result) -> dict:
    ci = r.fraction_ci or [None, None]
    return {
        "file": path.name, "status": r.status, "correct": r.correct, "tier": r.tier or "", "borderline": r.borderline,
        "fraction": f"{r.fraction:.4f}" if r.fraction is not None else "",
        "fraction_low": f"{ci[0]:.4f}" if ci[0] is not None else "",
        "fraction_high": f"{ci[1]:.4f}" if ci[1] is not None else "",
        "gbps": f"{r.gbps:.1f}" if r.gbps is not None else "",
        "diagnosis": " ".join(d.code for d in r.diagnosis), "flags": " ".join(r.flags),
        "message": r.message.splitlines()[0] if r.message else "", "seconds": f"{r.seconds:.1f}",
    }


def write_summary(results: list[tuple[Path, Result]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=SUMMARY_COLUMNS)
        writer.writeheader()
        for p, r in results:
            writer.writerow(summary_row(p, r))
