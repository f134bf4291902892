"""What every command shares: the output formats, the error console (rich's, drawn by screen.py,
made at its first message), the terminal's width, and the one place a domain error becomes a message
and an exit code."""

from __future__ import annotations

import dataclasses
import functools
import sys
import typing
from typing import TYPE_CHECKING

import click

from grader.core.errors import GraderError
from grader.core.typed import type_hints
from grader.platforms.documents import FORMATS  # noqa: F401 - the one list, as the options offer it

if TYPE_CHECKING:
    from rich.console import Console


class LazyErrConsole:
    """err_console(), made (and rich imported) at its first message: `grader submit -q` prints none
    on the way to its grade, and rich's import (25 to 60 ms) was on that way."""

    def __init__(self) -> None:
        self._console: Console | None = None

    def print(self, *args, **kw) -> None:
        if self._console is None:
            from grader.cli.screen import err_console  # noqa: PLC0415  (lazy: rich's import, at the first line printed)

            self._console = err_console()
        self._console.print(*args, **kw)


def fail(exc: GraderError) -> None:
    """The one place a domain error becomes a message and an exit code."""
    click.echo(f"grader: {exc}", err=True)
    sys.exit(exc.exit_code)


class SectionedCommand(click.Command):
    """A command whose --help lists its options by section: an option given a `section` attribute
    (options_from) is listed under that heading, the rest under "Options"."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        sections: dict[str, list[tuple[str, str]]] = {"Options": []}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None:
                sections.setdefault(getattr(param, "section", "Options"), []).append(record)
        for heading, rows in sections.items():
            if rows:
                with formatter.section(heading):
                    formatter.write_dl(rows)


def options_from(cls: type, *, into: str, section: str):
    """Decorator: a click option for each field of the dataclass cls that carries a `flag` in its
    metadata (its help, default and bounds from the field: said once, in the library), listed under
    section; the command receives the chosen values as one cls under the parameter name into."""
    hints = type_hints(cls)
    fields = [f for f in dataclasses.fields(cls) if "flag" in f.metadata]

    def click_type(f: dataclasses.Field):
        meta = f.metadata
        if "choices" in meta:
            return click.Choice(list(meta["choices"]))
        base = next((a for a in typing.get_args(hints[f.name]) if a is not type(None)), hints[f.name])
        if base is int:
            return click.IntRange(min=meta.get("at_least"))
        if base is float:
            return click.FloatRange(min=meta.get("at_least"))
        return click.STRING

    def decorate(command):
        @functools.wraps(command)
        def run(**kwargs):
            chosen = {f.name: kwargs.pop(f"{into}__{f.name}") for f in fields}
            return command(**kwargs, **{into: cls(**chosen)})

        for f in reversed(fields):
            option = click.Option([f.metadata["flag"], f"{into}__{f.name}"], type=click_type(f), default=f.default,
                                  show_default=f.default is not None, metavar=f.metadata.get("metavar"),
                                  help=f.metadata["help"])
            option.section = section
            run.__dict__.setdefault("__click_params__", []).append(option)
        return run

    return decorate


_STOPPED_BY: list[str] = []      # the signal that stopped the command (cli._interrupted), where one did


def stopped_by(signal_name: str) -> None:
    """Record the signal that stopped the command (SIGINT, SIGTERM), for the line that says so."""
    _STOPPED_BY[:] = [signal_name]


def interrupted() -> str:
    """'interrupted by SIGTERM' (the signal named, as Slurm, CI and `timeout` send it; SIGINT is
    Ctrl-C), or 'interrupted' where no signal was seen (a KeyboardInterrupt of Python's own)."""
    if not _STOPPED_BY:
        return "interrupted"
    name = _STOPPED_BY[0]
    return f"interrupted by {name}" + (" (Ctrl-C)" if name == "SIGINT" else "")
