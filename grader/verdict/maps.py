"""A picture of a failed check: where in the output the wrong elements are.

Where the wrong elements lie (a band of rows never written, every column past a boundary,
stripes from a bias read by the row, the edge a missing guard overruns) is the clearest clue a
student gets. A map covers a 2-D slice of the output: the last dimension across, down the
largest of the others; an output of more dimensions is shown at the indices of its first wrong
element in the rest (RoPE: position by head dimension, at that batch and head). The whole slice is
downsampled to at most MAX_ROWS x MAX_COLS cells, each holding its share of wrong and of
never-written (still the poison) elements; when it is, a window of ZOOM_ROWS x ZOOM_COLS
elements from the first wrong one is kept at full size too (every other row skipped is a grey
half in the whole map, and stripes in the window). Floats written outside the output (into the
guard regions on either side) are counted beside it.

The map is built once, here, from the comparison's own masks (results.MistakeMap); the reports
only draw it (a block map in the terminal, inline SVG in HTML, an SVG file beside report.md).
"""

from __future__ import annotations

import math

import numpy as np

from grader.core.checking import FailedOutput, unwritten_mask, within
from grader.core.results import MapGrid, MistakeMap

MAX_ROWS, MAX_COLS = 32, 64
ZOOM_ROWS, ZOOM_COLS = 16, 64


def _slice_axes(shape: tuple[int, ...]) -> tuple[int | None, int]:
    """(the axis down, the axis across): the last across, the largest of the others down."""
    cols = len(shape) - 1
    if cols == 0:
        return None, 0
    return max(range(cols), key=lambda k: (shape[k], -k)), cols


def _sum_cells(mask: np.ndarray, cr: int, cc: int) -> np.ndarray:
    """Per cell of cr x cc elements, how many of mask's are set (the edges' cells are partial):
    sums over each band of rows, then each band of columns (no padded copy: the timed shape's map
    is 16M elements)."""
    r, c = mask.shape
    if r % cr == 0 and c % cc == 0:           # whole cells (the timed shapes): a view, summed in place
        return mask.reshape(r // cr, cr, c // cc, cc).sum(axis=(1, 3), dtype=np.int64)
    rows = np.add.reduceat(mask, np.arange(0, r, cr), axis=0, dtype=np.int64)
    return np.add.reduceat(rows, np.arange(0, c, cc), axis=1)


def _cell_sizes(r: int, c: int, cr: int, cc: int) -> np.ndarray:
    """How many elements each cell holds (the last row and column of cells may hold fewer)."""
    down = np.diff(np.append(np.arange(0, r, cr), r))
    across = np.diff(np.append(np.arange(0, c, cc), c))
    return np.outer(down, across)


def _tenths(count: np.ndarray, total: np.ndarray) -> list[str]:
    share = np.where(count > 0, np.clip(np.floor(9 * count / total), 1, 9), 0).astype(int)
    return ["".join(str(v) for v in row) for row in share]


def _grid(wrong: np.ndarray, unwritten: np.ndarray, row0: int, col0: int, cr: int, cc: int) -> MapGrid:
    total = _cell_sizes(*wrong.shape, cr, cc)
    return MapGrid(row0, col0, cr, cc, _tenths(_sum_cells(wrong, cr, cc), total),
                   _tenths(_sum_cells(unwritten, cr, cc), total))


def build_map(failed: FailedOutput) -> MistakeMap:
    """The map of one failed output: what came back against what was wanted, around its first wrong
    element."""
    case, tensor, axes, got, want = failed.case, failed.tensor, failed.axes, failed.got, failed.want
    rtol, atol, init, guards = failed.rtol, failed.atol, failed.init, failed.guards
    first = failed.cmp.first.index if failed.cmp.first else None
    shape = tuple(got.shape)
    down, across = _slice_axes(shape)
    keep = {across} | ({down} if down is not None else set())
    index: list[object] = list(first or [0] * len(shape))
    for k in keep:
        index[k] = slice(None)
    g, w = got[tuple(index)], want[tuple(index)]          # (down, across): numpy keeps the axes' order
    if g.ndim == 1:
        g, w = g[None, :], w[None, :]
    if failed.cmp.masks is not None and got.ndim <= 2:     # the slice is the whole output: its check's flags
        wrong, unwritten = (m.reshape(g.shape) for m in failed.cmp.masks)
    else:
        with np.errstate(invalid="ignore", over="ignore"):
            unwritten = unwritten_mask(g, w, init, atol)
            wrong = ~within(g, w, rtol=rtol, atol=atol) & ~unwritten
    rows, cols = g.shape
    cr, cc = math.ceil(rows / MAX_ROWS), math.ceil(cols / MAX_COLS)
    whole = _grid(wrong, unwritten, 0, 0, cr, cc)
    zoom = None
    if cr > 1 or cc > 1:
        bad = (wrong | unwritten).reshape(-1)
        hit = int(bad.argmax()) if bad.any() else 0        # the first wrong element, without listing them all
        r0, c0 = divmod(hit, cols)
        r0 = max(0, min(r0, rows - ZOOM_ROWS))
        c0 = max(0, min(c0 - c0 % 8, cols - ZOOM_COLS))          # from a multiple of 8: a vector's edge shows
        window = (slice(r0, r0 + ZOOM_ROWS), slice(c0, c0 + ZOOM_COLS))
        zoom = _grid(wrong[window], unwritten[window], r0, c0, 1, 1)
    at = ", ".join(f"{axes[k]} {first[k]}" for k in range(len(shape)) if k not in keep) if first else ""
    return MistakeMap(case, tensor, axes[down] if down is not None else "", axes[across], rows, cols, at, whole, zoom,
                      guards.before, guards.after)
