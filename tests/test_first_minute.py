"""A student's first minute (issue 37): the first errors they make are shown in their own file,
as the compiler prints them, never only in system headers and the grader's harness."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import run_grader
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed (CI installs it)")

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "submissions" / "bias_gelu_fused"

FIRST_LINES = {
    "missing_brace.cu": ['missing_brace.cu: at the end of the file: error: expected a "}"',     # the file named
                         'missing_brace.cu(8): note #3196-D: to match this "{"'],
    "missing_semicolon.cu": ['missing_semicolon.cu(10): error: expected a ";"',
                             "          out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));"],
    "compile_error.cu": ['compile_error.cu(10): error: identifier "colls" is undefined'],
    "launcher_wrong_types.cu": ["launcher_wrong_types.cu defines launchBiasGeluFused(float const*, float const*, "
                                "float*, unsigned long, unsigned long, CUstream_st*), but the grader calls "
                                "launchBiasGeluFused(float const*, float const*, float*, int, int, CUstream_st*):"],
}


def _submit(path: Path, tmp_path: Path) -> list[str]:
    r = run_grader("submit", str(path), "--backend", "emulator", "-q", "--report-dir", str(tmp_path / "report"),
                   env={"COLUMNS": "400"})
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
    told = next(ln for ln in shown if "more error(s) follow from the one(s) above" in ln)
    assert "in the grader's harness where it includes your file" in told and "headers reported" not in told
    assert not any(ln.startswith("/usr/include") for ln in shown)


@pytest.mark.parametrize("width", [80, 120])
def test_the_text_output_fits_the_terminal_and_indents_what_it_wraps(width):
    """Prose wrapped at spaces to the width, continuation lines indented past their line's own
    indent; source lines, map rows and table rows left whole."""
    from grader.cli.screen import fitted

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
    r = run_grader("submit", str(SAMPLES / "skipped_rows.cu"), "--backend", "emulator", "-q",
                   "--report-dir", str(tmp_path / "report"), env={"COLUMNS": "80"})
    assert "INCORRECT" in r.stdout, r.stdout + r.stderr
    long = [ln for ln in r.stdout.splitlines() if len(ln) > 80 and not ln.startswith("report: /")]   # a path stays whole
    assert long == [], long
    assert "  Whole rows of the output were never written." in r.stdout       # the advice, wrapped under its indent


def _cli(*args: str, tmp_path: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return run_grader(*args, env=env)


def test_explain_of_a_missing_file_answers_in_one_line_as_submit_does(tmp_path):
    for command in ("explain", "submit"):
        r = _cli(command, str(tmp_path / "nosuch.cu"), tmp_path=tmp_path)
        assert r.returncode == 2 and r.stderr.strip() == f"grader: {tmp_path / 'nosuch.cu'}: no such file", r.stderr


def test_the_command_list_says_each_summary_whole(tmp_path):
    r = _cli("--help", tmp_path=tmp_path, env={"COLUMNS": "80"})
    commands = r.stdout.split("Commands:", 1)[1].strip().splitlines()
    assert len(commands) >= 10 and not any(line.rstrip().endswith("...") for line in commands), commands
    assert all(line.rstrip().endswith(".") for line in commands), commands


def test_a_refusal_for_the_machine_is_not_an_attempt_and_history_dates_its_rows(tmp_path):
    """--backend cuda without a GPU: infrastructure_error, not kept in the file's history; the
    history lists each attempt with its date."""
    from grader.toolchain import gpuinfo

    if gpuinfo.cuda_available():
        pytest.skip("this machine has a GPU")
    sample = tmp_path / "k.cu"
    sample.write_text((SAMPLES / "scalar_2d.cu").read_text())
    r = _cli("submit", str(sample), "--backend", "cuda", "-q", tmp_path=tmp_path)
    assert r.returncode == 4, r.stdout + r.stderr
    assert "no attempts" in _cli("history", str(sample), tmp_path=tmp_path).stdout
    assert _cli("submit", str(sample), "--backend", "emulator", "-q", tmp_path=tmp_path).returncode == 0
    listed = _cli("history", str(sample), tmp_path=tmp_path, env={"COLUMNS": "120"}).stdout
    import re
    import time as clock

    assert re.search(rf"\b{clock.strftime('%Y-%m-%d')} \d\d:\d\d\b", listed), listed
    assert listed.count("│ correct │") == 1                           # the emulator grade, once


def test_an_empty_file_has_its_digest_and_the_report_escapes_launches(tmp_path):
    import hashlib
    import json

    empty = tmp_path / "empty.cu"
    empty.write_text("")
    r = _cli("submit", str(empty), "--backend", "emulator", "-q", "--report-dir", str(tmp_path / "r"), tmp_path=tmp_path)
    doc = json.loads((tmp_path / "r" / "result.json").read_text())
    assert doc["submission"]["sha256"] == hashlib.sha256(b"").hexdigest(), r.stdout
    ok = _cli("submit", str(SAMPLES / "scalar_2d.cu"), "--backend", "emulator", "-q", "--report-dir",
              str(tmp_path / "r2"), tmp_path=tmp_path, env={"COLUMNS": "120"})
    assert "launches at the timed shape (rows 16384 x cols 1024):" in ok.stdout, ok.stdout
    html = (tmp_path / "r2" / "report.html").read_text()
    assert "&lt;&lt;&lt;" in html and "<<<" not in html.split("<body", 1)[-1].split("<script", 1)[0]


@pytest.mark.parametrize("header, said", [
    ("helper_cuda.h", "the CUDA samples' helper header"),
    ("helper_math.h", "the CUDA samples' float2/float4 operators"),
    ("common/book.h", "CUDA by Example"),
])
def test_a_header_brought_from_elsewhere_is_said_for_what_it_is(header, said, tmp_path, rubric):
    from grader.grade.pipeline import grade_submission

    path = tmp_path / "brought.cu"
    path.write_text(f"#include <cuda_runtime.h>\n#include <{header}>\n"
                    "__global__ void biasGeluFused(const float* x, const float* bias, float* out, size_t cols) {}\n")
    result = grade_submission(path, rubric=rubric, backend="emulator")
    assert result.status == "compile_error"
    assert f"{header}: {said}" in result.message and "not part of the CUDA toolkit" in result.message, result.message
    assert result.message.index("brought.cu:2") < result.message.index(said)      # the compiler's line first


def test_a_launcher_returning_an_error_code_is_told_to_return_void(tmp_path, rubric):
    from grader.grade.pipeline import grade_submission

    path = tmp_path / "returns.cu"
    path.write_text("__global__ void biasGeluFused(const float* x, const float* bias, float* out, size_t cols) {}\n"
                    "cudaError_t launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols,"
                    " cudaStream_t stream) {\n  biasGeluFused<<<dim3(1, rows), 256, 0, stream>>>(x, bias, out, cols);\n"
                    "  return cudaGetLastError();\n}\n")
    result = grade_submission(path, rubric=rubric, backend="emulator")
    assert result.status == "compile_error"
    assert "Declare it returning void, with exactly these parameter types" in result.message, result.message
