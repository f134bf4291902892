"""A student's first minute (issue 37): the first errors they make are shown in their own file,
as the compiler prints them, never only in system headers and the grader's harness."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed (CI installs it)")

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "submissions" / "bias_gelu_fused"

FIRST_LINES = {
    "missing_brace.cu": ['At end of source: error: expected a "}"',
                         'missing_brace.cu(8): note #3196-D: to match this "{"'],
    "missing_semicolon.cu": ['missing_semicolon.cu(10): error: expected a ";"',
                             "          out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));"],
    "compile_error.cu": ['compile_error.cu(10): error: identifier "colls" is undefined'],
    "launcher_wrong_types.cu": ["launcher_wrong_types.cu defines launchBiasGeluFused(float const*, float const*, "
                                "float*, unsigned long, unsigned long, CUstream_st*), but the grader calls "
                                "launchBiasGeluFused(float const*, float const*, float*, int, int, CUstream_st*):"],
}


def _submit(path: Path, tmp_path: Path) -> list[str]:
    r = subprocess.run([sys.executable, "-m", "grader", "submit", str(path), "--backend", "emulator", "-q",
                        "--report-dir", str(tmp_path / "report")], capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, "GRADER_CACHE_DIR": str(tmp_path / "cache"), "COLUMNS": "200"})
    assert r.returncode == 3, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    return lines[lines.index("DID NOT COMPILE") + 1:]


@needs_nvcc
@pytest.mark.parametrize("name", sorted(FIRST_LINES))
def test_the_first_lines_a_student_sees_are_in_their_own_file(name, tmp_path):
    shown = _submit(SAMPLES / name, tmp_path)
    want = FIRST_LINES[name]
    assert shown[: len(want)] == want, "\n".join(shown[:8])
    assert not any("/usr/include" in ln or "harness" in ln.split(":")[0] for ln in shown[: len(want) + 2])


@needs_nvcc
def test_the_harness_errors_behind_a_missing_brace_are_counted_not_shown(tmp_path):
    shown = _submit(SAMPLES / "missing_brace.cu", tmp_path)
    assert any("the grader's harness and headers reported" in ln for ln in shown)
    assert not any(ln.startswith("/usr/include") for ln in shown)


@pytest.mark.parametrize("width", [80, 120])
def test_the_text_output_fits_the_terminal_and_indents_what_it_wraps(width):
    """Prose wrapped at spaces to the width, continuation lines indented past their line's own
    indent; source lines, map rows and table rows left whole."""
    from grader.cli.common import fitted

    advice = "  " + " ".join(["Load and store float4 (16 bytes) from your own launcher when cols is a multiple of 4"] * 4)
    source = "    " + "x" * (width + 30)
    table = "  " + "kernel".ljust(30) + "   " + "1.0".rjust(width)
    lines = fitted("\n".join(["[bold]tier: GOLD[/bold]", advice, source, table]), width)
    plain = [t.plain for t in lines]
    assert plain[0] == "tier: GOLD" and lines[0].spans                # markup kept
    wrapped = plain[1:-2]
    assert len(wrapped) > 1 and all(len(p) <= width for p in wrapped), wrapped
    assert all(p.startswith("    ") and not p.startswith("     ") for p in wrapped[1:])   # indent 2 + 2
    assert " ".join(p.strip() for p in wrapped) == advice.strip()     # nothing lost, nothing cut in a word
    assert plain[-2:] == [source, table]


@needs_nvcc
def test_submit_at_80_columns_prints_no_prose_line_past_80(tmp_path):
    """skipped_rows.cu's output (its advice ran to 247 columns, its check line to 151)."""
    r = subprocess.run([sys.executable, "-m", "grader", "submit", str(SAMPLES / "skipped_rows.cu"), "--backend",
                        "emulator", "-q", "--report-dir", str(tmp_path / "report")], capture_output=True, text=True,
                       cwd=ROOT, env={**os.environ, "GRADER_CACHE_DIR": str(tmp_path / "cache"), "COLUMNS": "80"})
    assert "INCORRECT" in r.stdout, r.stdout + r.stderr
    long = [ln for ln in r.stdout.splitlines() if len(ln) > 80]
    assert long == [], long
    assert "  Whole rows of the output were never written." in r.stdout       # the advice, wrapped under its indent
