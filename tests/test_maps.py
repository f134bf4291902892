"""The picture of a mistake (grader/verdict/maps.py): each known-bad shape of output gives its
shape of map, and the reports draw it (terminal, HTML, the SVG beside report.md)."""

import numpy as np
import pytest

from grader.core.checking import POISON_BITS, FailedOutput, GuardDamage, Mismatch, compare
from grader.verdict.maps import MAX_COLS, MAX_ROWS, build_map

NO_GUARD = GuardDamage(0, 0, 0)


def _poison(shape):
    return np.full(shape, POISON_BITS, dtype=np.uint32).view(np.float32)


def _map(got, want, axes=("rows", "cols"), guards=NO_GUARD, first=None):
    bad = np.argwhere(~np.isclose(got, want, rtol=1e-5, atol=1e-6) | np.isnan(got))
    first = first or ([int(i) for i in bad[0]] if len(bad) else None)
    cmp = compare(got, want, rtol=1e-5, atol=1e-6)
    cmp.first = Mismatch(first, 0.0, 0.0) if first else None           # the element the map is drawn around
    return build_map(FailedOutput("case", "out", list(axes), got, want, {}, {}, 1e-5, 1e-6, "poison", cmp, guards))


def _digits(rows):
    return np.array([[int(c) for c in row] for row in rows])


def test_a_band_of_rows_never_written_is_a_grey_band_across_the_map():
    want = np.random.default_rng(1).normal(size=(20, 30))
    got = want.astype(np.float32)
    got[5:9] = _poison((4, 30))
    m = _map(got, want)
    unwritten, wrong = _digits(m.whole.unwritten), _digits(m.whole.wrong)
    assert m.whole.cell_rows == m.whole.cell_cols == 1 and m.zoom is None
    assert (unwritten[5:9] == 9).all() and (unwritten[:5] == 0).all() and (unwritten[9:] == 0).all()
    assert (wrong == 0).all()


def test_columns_past_a_boundary_are_a_right_hand_region_and_a_large_slice_is_downsampled():
    want = np.ones((1000, 700))
    got = want.astype(np.float32)
    got[:, 500:] = _poison((1000, 200))
    m = _map(got, want)
    u = _digits(m.whole.unwritten)
    assert u.shape[0] <= MAX_ROWS and u.shape[1] <= MAX_COLS and m.whole.cell_cols == 11
    boundary = 500 // m.whole.cell_cols
    assert (u[:, : boundary] == 0).all() and (u[:, boundary + 1:] == 9).all()
    assert m.zoom is not None and m.zoom.row0 == 0 and m.zoom.col0 <= 500          # from the first wrong element


def test_every_other_row_is_half_grey_in_the_whole_and_stripes_in_the_zoom():
    want = np.ones((4096, 256))
    got = want.astype(np.float32)
    got[1::2] = _poison((2048, 256))
    m = _map(got, want)
    assert set("".join(m.whole.unwritten)) == {"4"}                                # half of every cell
    z = _digits(m.zoom.unwritten)
    assert m.zoom.row0 == 1 and (z[0::2] == 9).all() and (z[1::2] == 0).all()


def test_a_bias_read_by_the_row_is_diagonal_stripes_where_the_bias_repeats():
    """The lesson's bias cycles over 11 values: read by the row, it is right where row = col mod 11."""
    rows, cols = 32, 64                            # a cell an element
    bias = ((np.arange(cols) % 11) - 5) * 0.25
    x = np.linspace(-3, 3, rows * cols).reshape(rows, cols)
    want = x + bias[None, :]
    got = (x + bias[:rows, None]).astype(np.float32)
    m = _map(got, want)
    w = _digits(m.whole.wrong)
    right = np.argwhere(w == 0)
    assert len(right) and all((c - r) % 11 == 0 for r, c in right)
    assert (w > 0).mean() > 0.85


def test_writes_outside_the_output_are_counted_beside_the_map():
    want = np.ones((4, 4))
    m = _map(want.astype(np.float32) + 1, want, guards=GuardDamage(0, 7, 7))
    assert (m.before, m.after) == (0, 7) and set("".join(m.whole.wrong)) == {"9"}


def test_an_output_of_four_dimensions_is_shown_at_its_first_wrong_elements_batch_and_head():
    """RoPE's out is (batch, seq, heads, headDim): the map is position by head dimension."""
    want = np.ones((3, 17, 5, 64))
    got = want.astype(np.float32)
    got[2, :, 4, 32:] = _poison((17, 32))
    m = _map(got, want, axes=("batch", "seq", "heads", "headDim"))
    assert (m.rows_axis, m.cols_axis, m.rows, m.cols, m.at) == ("seq", "headDim", 17, 64, "batch 2, heads 4")
    u = _digits(m.whole.unwritten)
    assert (u[:, 32:] == 9).all() and (u[:, :32] == 0).all()


@pytest.mark.parametrize("sample,exercise", [("skipped_rows.cu", "bias_gelu_fused"),
                                             ("upper_half_unwritten.cu", "rope_half_split")])
def test_the_known_bad_samples_maps_in_every_report(sample, exercise, tmp_path):
    """Graded on the emulator: the map in result.json, drawn in the terminal (letters without a
    colour terminal, blocks with one), inline in report.html and as map-1.svg beside report.md."""
    from grader.exercises import load_exercise
    from grader.grade.pipeline import grade_submission
    from grader.report.files import render_text, write_reports

    rubric = load_exercise(exercise)
    result = grade_submission(f"submissions/{exercise}/{sample}", rubric=rubric, backend="emulator")
    assert result.correct is False and result.maps
    m = result.maps[0]
    if sample == "skipped_rows.cu":                  # every other row at the timed shape
        assert m.case.startswith("timed") and m.zoom is not None
        assert _digits(m.zoom.unwritten)[::2].min() == 9 and _digits(m.zoom.unwritten)[1::2].max() == 0
    else:                                            # the upper half of every head never written
        assert (m.rows_axis, m.cols_axis) == ("seq", "headDim")
        u = _digits(m.whole.unwritten)
        assert (u[:, m.cols // 2:] == 9).all() and (u[:, : m.cols // 2] == 0).all()
    plain = render_text(result, rubric, colour=False)
    assert "OOOO" in plain and f"where out went wrong in {m.case}" in plain
    assert "▀" in render_text(result, rubric, colour=True)
    written = {p.name for p in write_reports(result, rubric, tmp_path)}
    assert {"report.html", "report.md", "map-1.svg"} <= written
    html = (tmp_path / "report.html").read_text()
    assert html.count('<svg class="map"') == len(result.maps) and "Where it went wrong" in html
    assert "![where out went wrong in" in (tmp_path / "report.md").read_text()
    svg = (tmp_path / "map-1.svg").read_text()
    assert svg.startswith('<svg xmlns="http://www.w3.org/2000/svg"') and svg.count("<rect") > 2


def test_the_cells_count_what_a_padded_reshape_would():
    """_sum_cells sums bands without a padded copy (the timed shape's map is 16M elements): the same
    counts as padding to whole cells and summing, edge cells partial, and the cell sizes likewise."""
    import math

    import numpy as np

    from grader.verdict import maps

    mask = np.random.default_rng(1).random((37, 101)) > 0.5

    def padded(m, cr, cc):
        r, c = m.shape
        p = np.zeros((math.ceil(r / cr) * cr, math.ceil(c / cc) * cc), dtype=np.int64)
        p[:r, :c] = m
        return p.reshape(p.shape[0] // cr, cr, p.shape[1] // cc, cc).sum(axis=(1, 3))

    for cr, cc in [(1, 1), (2, 2), (3, 7), (37, 101), (5, 64)]:
        assert (maps._sum_cells(mask, cr, cc) == padded(mask, cr, cc)).all()
        assert (maps._cell_sizes(37, 101, cr, cc) == padded(np.ones((37, 101), bool), cr, cc)).all()


@pytest.mark.parametrize("shape", [(37, 300), (1000,), (3, 5, 40)])
def test_a_map_from_its_checks_flags_is_the_map_made_again(shape):
    """A failed output's map takes the flags its check's float64 pass made (wrong, unwritten) where
    the map's slice is the whole output, instead of a second float64 pass: the same map."""
    import dataclasses

    from grader.core.checking import unwritten_mask, within

    rng = np.random.default_rng(7)
    want = rng.normal(size=shape)
    got = want.astype(np.float32)
    flat = got.reshape(-1)
    flat[::7] += 0.5                                                    # wrong
    flat[5::11] = _poison(flat[5::11].shape)                            # never written
    cmp = compare(got, want, rtol=1e-5, atol=1e-6)
    wrong, unwritten = cmp.masks
    never = unwritten_mask(got, want, "poison", 1e-6).reshape(-1)
    assert np.array_equal(unwritten, never)
    assert np.array_equal(wrong, ~within(got, want, rtol=1e-5, atol=1e-6).reshape(-1) & ~never)
    first = [int(i) for i in np.unravel_index(0, shape)]
    cmp.first = Mismatch(first, 0.0, 0.0)
    failed = FailedOutput("case", "out", [f"d{k}" for k in range(len(shape))], got, want, {}, {}, 1e-5, 1e-6,
                          "poison", cmp, NO_GUARD)
    again = dataclasses.replace(failed, cmp=dataclasses.replace(cmp, masks=None))
    assert build_map(failed) == build_map(again)
    blank = dataclasses.replace(failed, cmp=dataclasses.replace(cmp, masks=(np.zeros_like(wrong), np.zeros_like(wrong))))
    assert (build_map(blank) != build_map(again)) == (len(shape) <= 2)   # the flags are what a 1-D or 2-D map draws
