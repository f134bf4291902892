"""One entry point: the document a --format names, as text."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING
from grader.platforms import junit
from grader.platforms import classroom
from grader.platforms.scoring import score
from grader.platforms import gradescope
from grader.platforms import prairielearn

if TYPE_CHECKING:                   # the CLI's options read FORMATS before any grade: the writers import late
    from grader.report.files import Rendered


def _json(rendered: Rendered) -> str:
    return rendered.json


def _markdown(rendered: Rendered) -> str:
    return rendered.markdown


def _junit(rendered: Rendered) -> str:
    return junit.document([junit.testsuite(rendered.result)]).decode()


def _classroom(rendered: Rendered) -> str:
    return classroom.output_line(rendered.result, score(rendered.result, rendered.rubric)) + "\n"


def _gradescope(rendered: Rendered) -> str:
    result = rendered.result
    return json.dumps(gradescope.results(result, score(result, rendered.rubric), rendered.markdown), indent=1) + "\n"


def _prairielearn(rendered: Rendered) -> str:
    return json.dumps(prairielearn.results(rendered.result, score(rendered.result, rendered.rubric)), indent=1) + "\n"


# Every --format but text (the terminal's summary), with what writes it: the one list of formats.
DOCUMENTS = {"json": _json, "markdown": _markdown, "junit": _junit, "classroom": _classroom,
             "gradescope": _gradescope, "prairielearn": _prairielearn}
FORMATS = ("text", *DOCUMENTS)


def render(fmt: str, rendered: Rendered) -> str:
    """The document fmt names (a key of DOCUMENTS) for the grade rendered holds (report/files.Rendered:
    its Markdown rendered once for every document that shows it): result.json's JSON, the Markdown
    report, JUnit XML, the Classroom `result=<base64>` output line, Gradescope's or PrairieLearn's JSON."""
    try:
        write = DOCUMENTS[fmt]
    except KeyError:
        raise ValueError(f"unknown format {fmt!r} (known: {', '.join(FORMATS)})") from None
    return write(rendered)
