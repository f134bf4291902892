"""One entry point: the document a --format names, as text."""

from __future__ import annotations

import json

from grader.platforms import classroom, gradescope, junit, prairielearn
from grader.platforms.scoring import score
from grader.core.results import Result
from grader.exercises.rubric import Rubric

PLATFORM_FORMATS = ("junit", "classroom", "gradescope", "prairielearn")


def render(fmt: str, result: Result, rubric: Rubric) -> str:
    """junit (XML), classroom (the `result=<base64>` output line), gradescope or prairielearn (JSON)."""
    from grader.report.files import render_markdown

    points = score(result, rubric)
    if fmt == "junit":
        return junit.document([junit.testsuite(result)]).decode()
    if fmt == "classroom":
        return classroom.output_line(result, points) + "\n"
    if fmt == "gradescope":
        return json.dumps(gradescope.results(result, points, render_markdown(result, rubric)), indent=1) + "\n"
    if fmt == "prairielearn":
        return json.dumps(prairielearn.results(result, points), indent=1) + "\n"
    raise ValueError(f"unknown format {fmt!r}")
