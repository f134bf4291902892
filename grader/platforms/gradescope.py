"""Gradescope: /autograder/results/results.json, as its autograder specification describes.

Top level: score, execution_time (seconds), output and output_format ("md"), tests (each
name, score, max_score, status "passed"/"failed", output, visibility) and leaderboard
(name, value, order "asc"/"desc"): the fraction of the copy floor belongs there.
"""

from __future__ import annotations

from grader.platforms.scoring import Score
from grader.core.results import Result


def results(result: Result, score: Score, markdown: str) -> dict:
    doc = {
        "score": score.total,
        "execution_time": max(int(round(result.seconds)), 0),
        "output": markdown,
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
