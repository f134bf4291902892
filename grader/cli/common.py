"""What every command shares: the output formats, the error console, and the one place a
domain error becomes a message and an exit code."""

from __future__ import annotations

import sys

from typing import TYPE_CHECKING

import click

from grader.core.errors import GraderError
from grader.platforms.documents import FORMATS  # noqa: F401 - the one list, as the options offer it

if TYPE_CHECKING:
    from rich.console import Console


def err_console() -> Console:
    # rich is imported here, not with the CLI: `grader submit` starts its children before it (grade/early.py)
    from rich.console import Console

    # Wrapped at the width a reader has (COLUMNS, else the terminal's); where stderr is no terminal
    # and COLUMNS is unset (a CI log, a pipe), never hard-wrapped: soft_wrap leaves lines whole.
    width = terminal_width(sys.stderr)
    if width is None:
        return Console(stderr=True, highlight=False, soft_wrap=True)
    return Console(stderr=True, highlight=False, width=width)


class LazyErrConsole:
    """err_console(), made (and rich imported) at its first message: `grader submit -q` prints none
    on the way to its grade, and rich's import (25 to 60 ms) was on that way."""

    def __init__(self) -> None:
        self._console: Console | None = None

    def print(self, *args, **kw) -> None:
        if self._console is None:
            self._console = err_console()
        self._console.print(*args, **kw)


def fail(exc: GraderError) -> None:
    """The one place a domain error becomes a message and an exit code."""
    click.echo(f"grader: {exc}", err=True)
    sys.exit(exc.exit_code)


def terminal_width(stream=None) -> int | None:
    """The columns to fit: COLUMNS where set, else the terminal's; None where the output (stream,
    stdout by default) is no terminal and COLUMNS is unset (a pipe or a file: lines left whole for
    the reader's tools)."""
    import os
    import shutil

    if os.environ.get("COLUMNS", "").isdigit() and int(os.environ["COLUMNS"]) > 0:
        return int(os.environ["COLUMNS"])
    stream = sys.stdout if stream is None else stream
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    return shutil.get_terminal_size().columns if tty else None


def echo_fitted(line: str, hang: int = 4) -> None:
    """One plain line, wrapped at its spaces to terminal_width() with its continuations indented
    hang columns past its own indent (a signature continues under its first parameter's column)."""
    import textwrap

    width = terminal_width()
    if width is None or len(line) <= width:
        click.echo(line)
        return
    indent = len(line) - len(line.lstrip(" "))
    click.echo(textwrap.fill(line, width, subsequent_indent=" " * (indent + hang), break_long_words=False,
                             break_on_hyphens=False))


def fitted(markup: str, width: int) -> list:
    """The rendered text (rich markup) as lines that fit width columns: a prose line longer than
    width is wrapped at its spaces, each continuation indented two past the line's own indent.
    Left whole: a line indented four or more (source, a signature, a compiler's caret), a map row,
    a table row (columns aligned by runs of spaces), a label and one value (report: a long path);
    a word longer than the width stays whole."""
    from rich.text import Text

    out = []
    for raw in markup.split("\n"):
        line = Text.from_markup(raw)
        plain = line.plain
        indent = len(plain) - len(plain.lstrip(" "))
        if (line.cell_len <= width or indent >= 4 or len(plain.split()) < 3 or "▀" in plain or "   " in plain.strip()
                or any(ch in plain for ch in "█▓▒░")):
            out.append(line)
            continue
        out.extend(_wrap(line, width, indent))
    return out


def _breaks(plain: str) -> list[int]:
    """Where a line may be cut: its spaces outside brackets (an index, `chain[row 0][col 2]`, is
    never split across lines)."""
    depth, out = 0, []
    for i, ch in enumerate(plain):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        elif ch == " " and depth == 0:
            out.append(i)
    return out


def _wrap(line, width: int, indent: int) -> list:
    """line (a rich Text) cut at spaces into pieces of at most width cells; pieces after the first
    start with indent + 2 spaces."""
    from rich.text import Text

    pieces, start, n = [], 0, len(line.plain)
    lead = indent
    breaks = _breaks(line.plain)
    while start < n:
        room = width - lead if pieces else width
        end = start + room
        if end >= n:
            cut = n
        else:
            space = max((i for i in breaks if start < i <= end), default=-1)
            cut = space if space > start else min((i for i in breaks if i > end), default=n)
        piece = line[start:cut]
        pieces.append(piece if not len(pieces) else Text(" " * (indent + 2)) + piece)
        start = cut
        while start < n and line.plain[start] == " ":
            start += 1
        lead = indent + 2
    return pieces


def print_table(headers: list[str], rows: list[list[str]], *, caption: str = "", steady: tuple[str, ...] = (),
                last: tuple[str, ...] = ()) -> None:
    """A rich table on stdout that fits terminal_width() (whole rows where there is none: a pipe or
    a file). Room is taken first from the columns whose cells wrap at their spaces (a diagnosis's
    codes, "3.2 (kept)"), the one with the most to spare first, down to each one's longest word;
    only where that is not enough is a long word folded at the column's edge (the widest column
    first, the columns named in last after the others: a long student name before a diagnosis
    code), never cut with an ellipsis. steady: headers of columns never narrowed (a fraction)."""
    from rich.console import Console
    from rich.table import Table

    width = terminal_width() or 200
    widths = column_widths(headers, rows, width - 3 * len(headers) - 1, steady=steady, last=last)
    table = Table(caption=caption or None, caption_justify="left")
    for h, w in zip(headers, widths):
        table.add_column(h, overflow="fold", width=w)
    for row in rows:
        table.add_row(*row)
    Console(highlight=False, width=width).print(table)


def column_widths(headers: list[str], rows: list[list[str]], room: int, *, steady: tuple[str, ...] = (),
                  last: tuple[str, ...] = ()) -> list[int]:
    """Each column's width, together at most room where they can be (print_table says how); a
    cell may hold rich markup."""
    from rich.text import Text

    cells = [[h, *(Text.from_markup(row[i]).plain for row in rows)] for i, h in enumerate(headers)]
    widths = [max(len(c) for c in col) for col in cells]
    words = [max(len(w) for c in col for w in (c.split() or [""])) for col in cells]
    free = [h not in steady for h in headers]
    while sum(widths) > room:                    # wrap at spaces: the most to spare first
        slack = [(widths[i] - words[i], i) for i in range(len(widths)) if free[i] and widths[i] > words[i]]
        if not slack:
            break
        widths[max(slack)[1]] -= 1
    while sum(widths) > room:                    # then fold the longest words: the widest column first
        wide = [(headers[i] not in last, widths[i], i) for i in range(len(widths))
                if free[i] and widths[i] > max(6, len(headers[i]))]
        if not wide:
            break
        widths[max(wide)[2]] -= 1
    return widths


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
    import dataclasses
    import functools
    import typing

    from grader.core.typed import type_hints

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
