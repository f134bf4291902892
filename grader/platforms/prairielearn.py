"""PrairieLearn's external grader: /grade/results/results.json.

gradable, score in [0, 1], message, tests (name, points, max_points, message, output). A
submission that could not be graded for its form (it did not compile, or was refused) is
gradable false with format_errors, which costs the student no attempt.
"""

from __future__ import annotations

from grader.core.outcomes import Outcome
from grader.core.results import Result
from grader.platforms.scoring import Score

_FORMAT_PROBLEMS = (Outcome.COMPILE_ERROR, Outcome.REJECTED)


def results(result: Result, score: Score) -> dict:
    if result.status in _FORMAT_PROBLEMS:
        return {"gradable": False, "score": 0.0, "message": result.message,
                "format_errors": [ln for ln in result.message.splitlines() if ln.strip()][:20]}
    if result.status == Outcome.INFRASTRUCTURE_ERROR:
        return {"gradable": False, "score": 0.0, "message": "The grader could not run here: " + result.message}
    return {
        "gradable": True,
        "score": round(score.total / score.maximum, 6) if score.maximum else 0.0,
        "message": result.feedback or result.message,
        "tests": [{"name": i.name, "points": i.score, "max_points": i.max_score, "message": i.message,
                   "output": i.message} for i in score.items],
    }
