"""GitHub Classroom: the payload its autograding reporter reads.

The reporter (classroom-resources/autograding-grading-reporter) reads, for each runner id
it is given, the environment variable <ID>_RESULTS: base64 of a JSON document
{"version": 1, "status": "pass"|"fail"|"error", "max_score": N, "tests": [...]}; it adds up
the tests' `score` against `max_score`. A workflow passes the grader step's output
`result` into that variable; this module writes `result=<base64>` to $GITHUB_OUTPUT.
"""

from __future__ import annotations

import base64
import json
import os

from grader.core.results import Result
from grader.platforms.scoring import Score


def payload(result: Result, score: Score) -> dict:
    path = result.submission.get("path", "")
    return {
        "version": 1,
        "status": score.status,
        "max_score": score.maximum,
        "tests": [{"name": item.name, "status": item.status, "score": item.score, "max_score": item.max_score,
                   "message": item.message, "test_code": f"grader submit {path}", "filename": path, "line_no": 0,
                   "execution_time": f"{result.seconds:.1f}s"} for item in score.items],
    }


def encode(document: dict) -> str:
    """Base64 without line breaks, as $GITHUB_OUTPUT takes one line."""
    return base64.b64encode(json.dumps(document).encode()).decode("ascii")


def output_line(result: Result, score: Score) -> str:
    return f"result={encode(payload(result, score))}"


def write_output(line: str) -> bool:
    """Append the line to $GITHUB_OUTPUT; False when not running in GitHub Actions."""
    target = os.environ.get("GITHUB_OUTPUT")
    if not target:
        return False
    with open(target, "a", encoding="utf-8") as f:
        f.write(line + "\n")
    return True
