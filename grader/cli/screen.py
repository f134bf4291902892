"""The terminal's screen, drawn with rich: the error console, text fitted to the terminal's width,
tables. Apart from cli/common.py so that `grader submit` imports rich only at its first line
printed (common.LazyErrConsole), never on its way to the grade."""

from __future__ import annotations

import os
import shutil
import sys
import textwrap

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text


def terminal_width(stream=None) -> int | None:
    """The columns to fit: COLUMNS where set, else the terminal's; None where the output (stream,
    stdout by default) is no terminal and COLUMNS is unset (a pipe or a file: lines left whole for
    the reader's tools)."""
    if os.environ.get("COLUMNS", "").isdigit() and int(os.environ["COLUMNS"]) > 0:
        return int(os.environ["COLUMNS"])
    stream = sys.stdout if stream is None else stream
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    return shutil.get_terminal_size().columns if tty else None


def err_console() -> Console:
    # Wrapped at the width a reader has (COLUMNS, else the terminal's); where stderr is no terminal
    # and COLUMNS is unset (a CI log, a pipe), never hard-wrapped: soft_wrap leaves lines whole.
    width = terminal_width(sys.stderr)
    if width is None:
        return Console(stderr=True, highlight=False, soft_wrap=True)
    return Console(stderr=True, highlight=False, width=width)


def echo_fitted(line: str, hang: int = 4) -> None:
    """One plain line, wrapped at its spaces to terminal_width() with its continuations indented
    hang columns past its own indent (a signature continues under its first parameter's column)."""
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
