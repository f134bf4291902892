"""One entry point: the document a --format names, as text."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:                   # the CLI's options read FORMATS before any grade: the writers import late
    from grader.core.results import Result
    from grader.exercises.rubric import Rubric

def _json(result: Result, rubric: Rubric) -> str:
    from grader.report.files import render_json

    return render_json(result)


def _markdown(result: Result, rubric: Rubric) -> str:
    from grader.report.files import render_markdown

    return render_markdown(result, rubric)


def _junit(result: Result, rubric: Rubric) -> str:
    from grader.platforms import junit

    return junit.document([junit.testsuite(result)]).decode()


def _classroom(result: Result, rubric: Rubric) -> str:
    from grader.platforms import classroom
    from grader.platforms.scoring import score

    return classroom.output_line(result, score(result, rubric)) + "\n"


def _gradescope(result: Result, rubric: Rubric) -> str:
    from grader.platforms import gradescope
    from grader.platforms.scoring import score
    from grader.report.files import render_markdown

    return json.dumps(gradescope.results(result, score(result, rubric), render_markdown(result, rubric)), indent=1) + "\n"


def _prairielearn(result: Result, rubric: Rubric) -> str:
    from grader.platforms import prairielearn
    from grader.platforms.scoring import score

    return json.dumps(prairielearn.results(result, score(result, rubric)), indent=1) + "\n"


# Every --format but text (the terminal's summary), with what writes it: the one list of formats.
DOCUMENTS = {"json": _json, "markdown": _markdown, "junit": _junit, "classroom": _classroom,
             "gradescope": _gradescope, "prairielearn": _prairielearn}
FORMATS = ("text", *DOCUMENTS)


def render(fmt: str, result: Result, rubric: Rubric) -> str:
    """The document fmt names (a key of DOCUMENTS): result.json's JSON, the Markdown report, JUnit
    XML, the Classroom `result=<base64>` output line, Gradescope's or PrairieLearn's JSON."""
    try:
        write = DOCUMENTS[fmt]
    except KeyError:
        raise ValueError(f"unknown format {fmt!r} (known: {', '.join(FORMATS)})") from None
    return write(result, rubric)
