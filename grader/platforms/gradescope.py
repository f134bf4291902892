"""Gradescope: /autograder/results/results.json, as its autograder specification describes.

Top level: score, execution_time (seconds), output and output_format ("md"), tests (each
name, score, max_score, status "passed"/"failed", output, visibility) and leaderboard
(name, value, order "asc"/"desc"): the fraction of the copy floor belongs there.

Gradescope shows output as Markdown with nothing beside it: report.md's maps (images of files
map-N.svg beside it, which Gradescope does not have) are left out, with a line saying where they
are (report.html holds them inline).
"""

from __future__ import annotations

import re

from grader.core.results import LEGEND_TEXT, Result
from grader.platforms.scoring import Score

# report.md's map images (report.md.j2: one line each, `![where ...](map-N.svg)`)
_MAP_IMAGES = re.compile(r"(?:^!\[[^\]\n]*\]\(map-\d+\.svg\)[ \t]*\n+)+", re.MULTILINE)
MAPS_ELSEWHERE = "The maps of where the output went wrong are in report.html (its images are inline there).\n\n"


def without_map_files(markdown: str) -> str:
    """report.md without its links to map-N.svg files (Gradescope has no files beside its output),
    nor the maps' legend."""
    return _MAP_IMAGES.sub(MAPS_ELSEWHERE, markdown, count=1).replace(f"\n{LEGEND_TEXT}.\n", "\n")


def results(result: Result, score: Score, markdown: str) -> dict:
    doc = {
        "score": score.total,
        "execution_time": max(int(round(result.seconds)), 0),
        "output": without_map_files(markdown),
        "output_format": "md",
        "tests": [{"name": i.name, "score": i.score, "max_score": i.max_score,
                   "status": "passed" if i.status == "pass" else "failed", "output": i.message,
                   "visibility": "visible"} for i in score.items],
    }
    if result.fraction is not None and result.correct:
        doc["leaderboard"] = [
            {"name": "fraction of the copy floor", "value": round(result.fraction, 4), "order": "desc"},
            {"name": "GB/s", "value": round(result.gbps or 0.0, 1), "order": "desc"},
        ]
    return doc
