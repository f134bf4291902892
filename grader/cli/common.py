"""What every command shares: the output formats, the error console, and the one place a
domain error becomes a message and an exit code."""

from __future__ import annotations

import sys

import click
from rich.console import Console

from grader.core.errors import GraderError

FORMATS = ("text", "json", "markdown", "junit", "classroom", "gradescope", "prairielearn")


def err_console() -> Console:
    # soft_wrap: never hard-wrapped at 80 columns where stderr is not a terminal (a CI log)
    return Console(stderr=True, highlight=False, soft_wrap=True)


def fail(exc: GraderError) -> None:
    """The one place a domain error becomes a message and an exit code."""
    click.echo(f"grader: {exc}", err=True)
    sys.exit(exc.exit_code)
