"""Rendering a Result: terminal summary, Markdown, HTML (with an inline SVG chart), result.json."""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path

from grader.core import atomic
from grader.core.outcomes import Tier
from grader.core.results import LEGEND_TEXT, MapGrid, MistakeMap, Result
from grader.exercises.rubric import Rubric
from grader.toolchain.render import render


@dataclass
class Bar:
    label: str
    value: float
    width: float
    y: float
    kind: str          # submission | floor | copy


def chart(result: Result, rubric: Rubric) -> dict | None:
    """Geometry of the bar chart: GB/s of the submission and each copy, with the tier lines."""
    t = result.timing
    if t is None:
        return None
    rows = [(f"{t.kernel} (yours)", t.submission_gbps, "submission")]
    rows += [(c.kind + (" (floor)" if c.kind == t.floor_kind else ""), c.gbps,
              "floor" if c.kind == t.floor_kind else "copy") for c in t.copies]
    top = max(v for _, v, _ in rows) * 1.1
    left, width, bar_h, gap = 190.0, 460.0, 26.0, 12.0
    bars = [Bar(label, value, width * value / top, 30 + i * (bar_h + gap), kind) for i, (label, value, kind) in enumerate(rows)]
    lines = [(name, left + width * frac * t.floor_gbps / top, frac)
             for name, frac in ((Tier.GOLD, rubric.tiers.gold), (Tier.SILVER, rubric.tiers.silver))]
    height = 30 + len(rows) * (bar_h + gap) + 30
    return {"bars": bars, "lines": lines, "left": left, "width": width, "bar_h": bar_h, "height": height,
            "total_width": left + width + 90}


# A map cell's colour: green where every element is right; else red for wrong, grey for never
# written (whichever there is more of), lighter for a smaller share. The terminal, the HTML and the
# SVG beside report.md all draw with these.
RIGHT = "#6fbf7f"
SHADES = {"wrong": ("#f4c0bb", "#e0776c", "#b3261e"), "unwritten": ("#d6d6d6", "#a0a0a0", "#606060")}


@dataclass
class MapView:
    """A MistakeMap made ready to draw: a colour per cell of the whole slice and of the zoom."""

    map: MistakeMap
    whole: list[list[str]]
    zoom: list[list[str]] | None
    whole_runs: list[list[tuple[int, int, str]]]       # per row: (first cell, cells, colour), for the SVG
    zoom_runs: list[list[tuple[int, int, str]]] | None
    terminal: list[list[str]]      # what the terminal draws: the whole map, or the zoom where the whole is one colour
    terminal_zoom: bool
    chars: list[list[str]]         # the same without colour (a log, a pipe): a letter per cell, CHARS
    px: int                        # a whole-map cell's side in the HTML/SVG drawing
    width: int                     # the drawing's size in pixels
    height: int
    whole_height: int
    title: str = ""                # the captions, built here once: the drawing is sized to fit them
    subtitle: str = ""
    zoom_caption: str = ""
    clean: bool = False            # nothing wrong inside the output, only its guards changed: said, not drawn as wrong
    clean_caption: str = ""        # what a clean map means, in a sentence (report.html's caption under it)


# Captions' width: an upper bound of a system-ui glyph's advance, as a share of its font size.
_GLYPH = 0.62


def _text_px(text: str, size: float) -> int:
    return int(len(text) * size * _GLYPH) + 8


# Without colour: right, then wrong and never written by share (a third, two thirds, more).
CHARS = {"right": ".", "wrong": "-xX", "unwritten": ":oO"}
CHARS_TEXT = ". right; - x X wrong (more of the cell: darker); : o O never written"


def _cell(w: int, u: int, palette: dict, right: str) -> str:
    """One cell's mark: right, else the larger of its wrong and never-written shares, darker the more."""
    kind, level = ("unwritten", u) if u >= w and u else ("wrong", w)
    return right if not level else palette[kind][0 if level <= 3 else 1 if level <= 6 else 2]


def _cells(grid: MapGrid, palette: dict, right: str) -> list[list[str]]:
    # every pair of digits once, then a look-up a cell (a map is up to thousands of cells, drawn
    # for the summary, report.md, report.html and the SVG)
    mark = {(str(w), str(u)): _cell(w, u, palette, right) for w in range(10) for u in range(10)}
    return [[mark[pair] for pair in zip(wrong, unwritten, strict=False)]
            for wrong, unwritten in zip(grid.wrong, grid.unwritten, strict=False)]


def _colours(grid: MapGrid) -> list[list[str]]:
    return _cells(grid, SHADES, RIGHT)


def _runs(rows: list[list[str]]) -> list[list[tuple[int, int, str]]]:
    out = []
    for row in rows:
        runs: list[tuple[int, int, str]] = []
        for j, c in enumerate(row):
            if runs and runs[-1][2] == c:
                runs[-1] = (runs[-1][0], runs[-1][1] + 1, c)
            else:
                runs.append((j, 1, c))
        out.append(runs)
    return out


def map_view(m: MistakeMap) -> MapView:
    whole = _colours(m.whole)
    zoom = _colours(m.zoom) if m.zoom else None
    across = max(len(r) for r in whole)
    px = max(4, min(14, 600 // across))
    whole_h = 40 + len(whole) * px + 28
    zoom_h = 40 + len(zoom) * 9 + 10 if zoom else 0
    title = f"{m.tensor} in {m.case}" + (f", at {m.at}" if m.at else "")
    subtitle = ((f"{m.rows_axis} down (0 to {m.rows - 1}), " if m.rows_axis else "") + f"{m.cols_axis} across (0 to "
                f"{m.cols - 1})" + (f"; a cell is {m.whole.cell_rows} x {m.whole.cell_cols} elements"
                                    if m.whole.cell_rows > 1 or m.whole.cell_cols > 1 else ""))
    zoom_caption = (f"each element, around the first wrong one: {m.rows_axis or 'row'} {m.zoom.row0} to "
                    f"{m.zoom.row0 + len(zoom) - 1}, {m.cols_axis} {m.zoom.col0} to {m.zoom.col0 + len(zoom[0]) - 1}"
                    if zoom else "")
    legend = LEGEND_TEXT + (f"; {m.after} floats written past the end of {m.tensor}" if m.after else "") + \
        (f", {m.before} before its start" if m.before else "")
    width = max(70 + max(across * px, len(zoom[0]) * 9 if zoom else 0) + 10,   # the cells, and every caption whole
                _text_px(title, 13), _text_px(subtitle, 12), _text_px(legend, 12), _text_px(zoom_caption, 12))
    flat = len({c for row in whole for c in row}) == 1
    shown = m.zoom if zoom and flat else m.whole
    clean = all(ch == "0" for row in [*m.whole.wrong, *m.whole.unwritten] for ch in row)   # a digit a cell: its share
    outside = " and ".join(([f"{m.after} float{'s' if m.after != 1 else ''} past its end"] if m.after else [])
                           + ([f"{m.before} before its start"] if m.before else []))
    clean_caption = (f"Every element of {m.tensor} is right; what went wrong is outside it: the kernel wrote {outside}, "
                     "into memory that is not its output (a bounds check that lets a thread past the last element "
                     "write)." if clean and outside else f"Every element of {m.tensor} is right." if clean else "")
    return MapView(m, whole, zoom, _runs(whole), _runs(zoom) if zoom else None, zoom if zoom and flat else whole,
                   bool(zoom and flat), _cells(shown, CHARS, CHARS["right"]), px, width, whole_h + zoom_h, whole_h,
                   title, subtitle, zoom_caption, clean, clean_caption)


def attempts_chart(attempts: list) -> dict | None:
    """Geometry of the small chart of the fraction over a file's attempts (two or more timed)."""
    points = [(i, a.fraction) for i, a in enumerate(attempts) if a.fraction is not None]
    if len(points) < 2:
        return None
    left, width, height, top = 40.0, 400.0, 110.0, 10.0
    high = max(1.0, max(f for _, f in points) * 1.05)
    step = width / max(1, len(attempts) - 1)
    xy = [(left + i * step, top + (height - top - 20) * (1 - f / high), f) for i, f in points]
    return {"points": xy, "left": left, "width": width, "height": height, "top": top,
            "base": height - 20, "high": high, "count": len(attempts)}


def notices(result: Result) -> list[str]:
    """What the reader must know about how this run was protected and measured."""
    found = []
    sb = result.sandbox
    if sb is None:
        return found
    if not sb.seccomp:
        found.append(f"The system-call filter was not in force here ({sb.seccomp_detail or 'unknown'}): the "
                     "submission ran with the other protections only (its own process group, resource limits, no "
                     "network where the grader runs as root). Set limits.require_seccomp to refuse to grade instead.")
    unconfined = sb.unconfined_reads()
    if unconfined:
        found.append(f"The file-system wall was not in force here ({unconfined}): the submission's code could read "
                     "any file its user may read, classmates' files included. Set limits.require_read_wall to refuse "
                     "to grade instead.")
    if sb.etc and not sb.etc.startswith("all of /etc"):       # core/fswall.etc_view
        found.append("The build and the submission's code ran as the grader's own user (the grader is not root): "
                     "they could read what that user may outside the system's folders (of /etc only what compilers "
                     "and the loader need). Run the grader as root, which runs them as nobody (docs/serve.md).")
    if result.sass is not None and result.sass.unavailable:
        found.append(f"What in the compiled code costs speed (wide loads, local memory, registers, occupancy) was not "
                     f"read here: {result.sass.unavailable}.")
    free, total = sb.gpu_memory_free_bytes, sb.gpu_memory_total_bytes
    if free is not None and total and free < 0.5 * total:
        found.append(f"Another process held {(total - free) / 2**30:.0f} GiB of this GPU's {total / 2**30:.0f} GiB "
                     "when this ran; its work may have disturbed the timing.")
    return found


def shown_message(result: Result) -> str:
    """The verdict's message as a student reads it: an internal error's traceback (there for the
    maintainers, in result.json) left out, with where to find it."""
    lines = result.message.splitlines()
    cut = next((i for i, line in enumerate(lines) if line.startswith("  File \"") or line.startswith("Traceback")), None)
    if cut is None:
        return result.message
    return "\n".join(lines[:cut] + ["(where it happened in the grader is in result.json's message, for the report)"])


def _context(result: Result, rubric: Rubric, attempts: list | None = None, views: list[MapView] | None = None) -> dict:
    """What every template reads; views: the maps' views where the caller drew them already."""
    return {"r": result, "rubric": rubric, "chart": chart(result, rubric),
            "notices": notices(result), "message": shown_message(result),
            "maps": views if views is not None else [map_view(m) for m in result.maps], "legend": LEGEND_TEXT,
            "right": RIGHT, "shades": SHADES, "attempts": attempts_chart(attempts or []), "standalone": False,
            "failed_cases": [c for c in result.cases if c.passed is False],
            "passed_count": sum(1 for c in result.cases if c.passed),
            "run_count": sum(1 for c in result.cases if c.passed is not None)}


def render_text(result: Result, rubric: Rubric, *, colour: bool = True, report: Path | None = None) -> str:
    """The terminal summary, with rich markup (print it through a rich Console); colour: the map in
    coloured blocks (a terminal), else in letters (a log); report: the report.html written (its
    path ends the summary; None: none was, and nothing points at one)."""
    return render("summary.txt.j2", **_context(result, rubric), colour=colour, chars_text=CHARS_TEXT,
                  report=str(report) if report else "")


# The most a grade's documents hold, whatever the student's file makes large (issue 70: a compiler's
# flood made 165-494 MB of each): each report under half a megabyte (both under 1 MB), result.json
# under 256 KiB (what the course server stores and a status request returns).
REPORT_BYTES = 480 * 1024
RESULT_CHARS = 256 * 1024          # result.json is ASCII (json.dumps escapes the rest): characters are bytes


def bounded_report(text: str, *, html: bool) -> str:
    """A report cut to REPORT_BYTES of UTF-8, saying where and how much (what is cut is the end: the
    verdict and the first messages come first)."""
    data = text.encode("utf-8", "surrogateescape")
    if len(data) <= REPORT_BYTES:
        return text
    said = f"[this report was cut here: {len(data) - REPORT_BYTES} more bytes]"
    kept = data[:REPORT_BYTES].decode("utf-8", "ignore")
    return kept + (f"\n<p><strong>{said}</strong></p>\n" if html else f"\n\n{said}\n")


def bounded_result(doc: dict) -> dict:
    """result.json's document within RESULT_CHARS: as it is where it fits; else with every text and
    every list cut shorter, step by step, until it does (the schema kept: a reader still reads it),
    its message saying so."""
    if len(json.dumps(doc)) <= RESULT_CHARS:
        return doc
    for chars, items in ((4000, 100), (1000, 20), (200, 5), (60, 1)):
        cut = _cut(doc, chars, items)
        cut["message"] = (f"{cut.get('message', '')}\n[result.json was over {RESULT_CHARS // 1024} KiB: its texts "
                          f"were cut to {chars} characters and its lists to {items} items]")
        if len(json.dumps(cut)) <= RESULT_CHARS:
            return cut
    return cut


def _cut(value, chars: int, items: int):
    if isinstance(value, str):
        return value if len(value) <= chars else f"{value[:chars]} [... {len(value) - chars} more characters]"
    if isinstance(value, list):
        return [_cut(v, chars, items) for v in value[:items]]
    if isinstance(value, dict):
        return {k: _cut(v, chars, items) for k, v in value.items()}
    return value


def render_markdown(result: Result, rubric: Rubric, attempts: list | None = None,
                    views: list[MapView] | None = None) -> str:
    return bounded_report(render("report.md.j2", **_context(result, rubric, attempts, views)), html=False)


def render_html(result: Result, rubric: Rubric, attempts: list | None = None,
                views: list[MapView] | None = None) -> str:
    return bounded_report(render("report.html.j2", **_context(result, rubric, attempts, views)), html=True)


def render_map_svg(view: MapView) -> str:
    """One map as a standalone SVG file (what report.md shows as an image)."""
    return render("map.svg.j2", v=view, standalone=True, legend=LEGEND_TEXT)


def render_json(result: Result, document: dict | None = None) -> str:
    """result.json's text, within RESULT_CHARS (bounded_result); document: the result's to_json()
    where the caller holds it already (Rendered.document: one serialisation a grade)."""
    doc = result.to_json() if document is None else document
    text = json.dumps(doc, indent=2, sort_keys=False) + "\n"
    if len(text) <= RESULT_CHARS:
        return text
    return json.dumps(bounded_result(doc), sort_keys=False) + "\n"


def default_report_dir(file: Path) -> Path:
    """Where `grader submit FILE` writes its reports unless told: beside FILE, FILE's name with
    -report (kernel.cu: kernel-report/; any other suffix kept, kernel.py: kernel.py-report/, so that
    kernel.py and kernel.cu never share one); under $GRADER_REPORTS_ROOT where that is set."""
    root = os.environ.get("GRADER_REPORTS_ROOT")
    name = f"{Path(file).stem}-report" if Path(file).suffix == ".cu" else f"{Path(file).name}-report"
    return Path(root) / name if root else Path(file).parent / name


class Rendered:
    """One grade's documents, each rendered at most once, when first asked for: the value every sink
    of a finished grade takes (docs/architecture.md, "A grade's sinks": the report folder, a batch's
    results.jsonl, the platforms' files, the course server's store, a --format document). The
    maps' views, the result's document (Result.to_json, once), report.md, report.html and
    result.json's text."""

    def __init__(self, result: Result, rubric: Rubric, attempts: list | None = None) -> None:
        self.result, self.rubric, self.attempts = result, rubric, attempts

    @functools.cached_property
    def views(self) -> list[MapView]:
        return [map_view(m) for m in self.result.maps]

    @functools.cached_property
    def markdown(self) -> str:
        return render_markdown(self.result, self.rubric, self.attempts, self.views)

    @functools.cached_property
    def html(self) -> str:
        return render_html(self.result, self.rubric, self.attempts, self.views)

    @functools.cached_property
    def document(self) -> dict:
        """The result as result.json's document (Result.to_json: the one call a grade makes)."""
        return self.result.to_json()

    @functools.cached_property
    def json(self) -> str:
        return render_json(self.result, self.document)


def write_reports(result: Result, rubric: Rubric, directory: Path, *, attempts: list | None = None,
                  rendered: Rendered | None = None) -> list[Path]:
    """report.md, report.html and result.json in directory (created if needed), and map-<k>.svg for
    each failed check's map (report.md shows them); attempts: the file's attempts, for the chart;
    rendered: the grade's documents where the caller renders them for more than these files."""
    rendered = rendered or Rendered(result, rubric, attempts)
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob("map-*.svg"):             # an earlier grade's
        old.unlink(missing_ok=True)
    written = []
    files = [("report.md", rendered.markdown), ("report.html", rendered.html), ("result.json", rendered.json)]
    files += [(f"map-{k}.svg", render_map_svg(v)) for k, v in enumerate(rendered.views, 1)]
    for name, text in files:
        path = directory / name
        atomic.replace_text(path, text)
        written.append(path)
    return written
