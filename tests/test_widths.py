"""Every command's terminal output fits the terminal's width, 80 columns included, keeping the
columns a reader needs whole (issue 64): `grader batch` (its opening and closing lines, its table),
`grader samples`, `grader submit` (a repeat grade still ends with the report's path), `explain`,
`exercises` and `history`; and what a batch writes beside: summary.csv's cells are one line each,
class.html's class names are class names, its "What made the slow kernels slow" counts correct,
timed kernels only."""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import SUBMISSIONS, run_grader

WIDTH = 80


def _grader(*args: str, columns: int = WIDTH) -> subprocess.CompletedProcess:
    """The command as a terminal of `columns` columns runs it (COLUMNS), stdout and stderr in one."""
    return run_grader(*args, env={"COLUMNS": str(columns)}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _too_wide(text: str, width: int = WIDTH) -> list[str]:
    """The lines past width, but for a label and one path that alone is longer than the width (a path
    cannot be cut, and CI's temporary folders make any path long): such a line holds nothing else."""
    def one_long_path(line: str) -> bool:
        words = line.split()
        return bool(words) and words[-1].startswith("/") and len(words[-1]) > width - 12 and len(words) <= 3

    return [line for line in text.splitlines() if len(line.rstrip()) > width and not one_long_path(line)]


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    """A small class on the emulator: a correct kernel, an incorrect one with a speed finding, a
    compile error; graded once for the tests below."""
    tmp = tmp_path_factory.mktemp("widths")
    folder = tmp / "class"
    folder.mkdir()
    for name in ("float4_launcher.cu", "missing_guard.cu", "compile_error.cu"):
        shutil.copy(SUBMISSIONS / name, folder / name)
    out = tmp / "out"
    proc = _grader("batch", str(folder), "--backend", "emulator", "--report-dir", str(out), "-j", "2")
    assert proc.returncode == 0, proc.stdout[-3000:]
    return SimpleNamespace(proc=proc, out=out)


def test_batch_fits_80_columns_with_its_columns_whole(batch):
    text = batch.proc.stdout
    assert not _too_wide(text), _too_wide(text)
    assert "…" not in text and "..." not in text.split("┏", 1)[1]          # the table cuts nothing
    header = next(line for line in text.splitlines() if "student" in line and "┃" in line)
    assert [h.strip() for h in header.strip("┃ ").split("┃")] == ["student", "outcome", "diagnosis", "seconds"]
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]]
            for line in text.splitlines() if line.startswith("│") and line.split("│")[1].strip()}
    assert rows["float4_launcher"][0] == "correct" and rows["compile_error"][0] == "compile_error"
    assert rows["missing_guard"][:2] == ["incorrect", "reads_past_input"]
    assert "grading against bias_gelu_fused" in text and "grader: wrote" in text          # wrapped, not lost
    assert "nothing was timed" in text                                                  # why no fraction column


def test_summary_csv_holds_each_cell_on_one_line(batch):
    text = (batch.out / "summary.csv").read_text()
    rows = list(csv.DictReader(text.splitlines()))
    assert len(text.splitlines()) == 1 + len(rows) == 4                 # a physical line a student
    message = next(r["message"] for r in rows if r["student"] == "compile_error")
    assert message.startswith('compile_error.cu(10): error: identifier "colls" is undefined / ')
    assert "+ colls;" in message and not message.endswith("^")          # the source line kept, its caret not


def test_the_class_page_has_valid_class_names_and_counts_only_timed_kernels_as_slow(batch):
    page = (batch.out / "class.html").read_text()
    names = re.findall(r'class="([^"]*)"', page)
    assert names and all(re.fullmatch(r"[A-Za-z0-9_ -]*", n) for n in names), sorted(set(names))
    assert 'class="compile-error"' in page and 'class="correct"' in page
    # missing_guard's kernel has a speed finding, but it is incorrect (and nothing is timed here)
    doc = json.loads((batch.out / "missing_guard" / "result.json").read_text())
    assert doc["correct"] is False and doc["findings"]
    assert json.loads((batch.out / "insights.json").read_text())["findings"] == []
    assert "What made the slow kernels slow" not in page and "What made the slow kernels slow" not in batch.proc.stdout


def test_the_class_table_on_a_gpu_keeps_its_columns_at_80(monkeypatch, capsys):
    """With a fraction and long codes and names: the codes and the fraction whole, a long name
    folded, nothing cut with an ellipsis."""
    from grader.batch.grading import Graded
    from grader.batch.inputs import Entry
    from grader.cli.screen import print_table
    from grader.cli.instructor import class_rows
    from grader.core.results import DiagnosisEntry, Result

    def graded(name, reused=False, **kw):
        r = Result(exercise="e", submission={"path": name, "sha256": "0" * 64}, backend="cuda", status="graded",
                   grader_version="t", seconds=3.2, **kw)
        return Graded(Entry(name, Path(name + ".cu")), r, reused=reused)

    broken = graded("a_rather_long_github_username_here")
    broken.result.stop("infrastructure_error", "x")
    wrong = [DiagnosisEntry("writes_past_output", "m", "a"), DiagnosisEntry("reads_past_input", "m", "a")]
    outcome = SimpleNamespace(graded=[graded("ann", correct=True, tier="silver", fraction=0.8123),
                                      graded("bo", correct=False, diagnosis=wrong, reused=True), broken])
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    columns, rows, caption = class_rows(outcome)
    assert columns == ["student", "outcome", "fraction", "diagnosis", "seconds"] and not caption
    print_table(columns, rows, caption=caption, steady=("fraction",), last=("diagnosis", "outcome"))
    text = capsys.readouterr().out
    assert not _too_wide(text) and "…" not in text, text
    for word in ("fraction", "silver", "0.812", "writes_past_output,", "reads_past_input", "incorrect",
                 "infrastructure_error", "(kept)"):
        assert word in text, (word, text)


def test_samples_fit_80_columns_and_say_what_batch_says():
    proc = _grader("samples", str(SUBMISSIONS), "--backend", "emulator", "--only", "float4_launcher.cu",
                   "--only", "missing_guard.cu")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert not _too_wide(proc.stdout), _too_wide(proc.stdout)
    assert not re.search(r"\b(None|True|False)\b", proc.stdout), proc.stdout      # Python's words, not batch's
    assert "reads_past_input" in proc.stdout and "backend: emulator" in proc.stdout
    assert "2 passed, 0 failed" in proc.stdout


def test_submit_fits_80_columns_and_a_repeat_still_ends_with_the_report(tmp_path):
    mine = tmp_path / "k.cu"
    shutil.copy(SUBMISSIONS / "missing_guard.cu", mine)
    first = _grader("submit", str(mine), "--backend", "emulator")
    again = _grader("submit", str(mine), "--backend", "emulator")
    for proc in (first, again):
        assert proc.returncode == 1, proc.stdout[-3000:]
        assert not _too_wide(proc.stdout), _too_wide(proc.stdout)
        assert proc.stdout.rstrip().splitlines()[-1].startswith("report: "), proc.stdout[-500:]
    assert "no change (the same file)" in again.stdout
    listed = _grader("history", str(mine)).stdout
    assert not _too_wide(listed) and "reads_past_input" in listed, listed


def test_exercises_fit_80_columns():
    text = _grader("exercises").stdout
    assert "bias_gelu_fused" in text and not _too_wide(text), _too_wide(text)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed (CI installs it)")
def test_explain_of_a_file_that_does_not_compile_fits_and_promises_no_report_it_does_not_write(tmp_path):
    mine = tmp_path / "k.cu"
    shutil.copy(SUBMISSIONS / "missing_brace.cu", mine)
    proc = _grader("explain", str(mine))
    assert proc.returncode == 3 and not _too_wide(proc.stdout), proc.stdout
    said = " ".join(proc.stdout.split())
    assert "in the grader's harness where it includes your file" in said
    assert "`grader submit`'s report lists every message" in said and "the report lists" not in said
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.cu"]                # explain writes no report
