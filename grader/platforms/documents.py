"""One entry point: the document a --format names, as text. The names are listed here, once, for
the command line's options (read at every command's start); the writers (platforms/writers.py, with
the scoring, JUnit and the report's rendering) are imported when a document is rendered."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grader.report.files import Rendered

# Every --format: the terminal's summary (text), then each document a writer makes.
FORMATS = ("text", "json", "markdown", "junit", "classroom", "gradescope", "prairielearn")


def render(fmt: str, rendered: Rendered) -> str:
    """The document fmt names (FORMATS but text) for the grade rendered holds (report/files.Rendered:
    its Markdown rendered once for every document that shows it): result.json's JSON, the Markdown
    report, JUnit XML, the Classroom `result=<base64>` output line, Gradescope's or PrairieLearn's JSON."""
    from grader.platforms.writers import WRITERS  # noqa: PLC0415  (lazy: the writers' imports, 0.08 s, off every start)

    if fmt == "text" or fmt not in WRITERS:
        raise ValueError(f"unknown format {fmt!r} (known: {', '.join(FORMATS[1:])})")
    return WRITERS[fmt](rendered)
