"""The writers of the --format documents, each from a grade's Rendered documents (platforms/
documents.py names them and calls these: the command line reads its list of formats without
importing any writer)."""

from __future__ import annotations

import json

from grader.platforms import classroom, gradescope, junit, prairielearn
from grader.platforms.scoring import score
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


# What writes each document, by its --format name (documents.FORMATS lists the same names, checked there).
WRITERS = {"json": _json, "markdown": _markdown, "junit": _junit, "classroom": _classroom,
           "gradescope": _gradescope, "prairielearn": _prairielearn}
