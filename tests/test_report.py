from pathlib import Path

import pytest

from grader.report.files import chart, render_html, render_markdown, render_text
from grader.core.results import CaseResult, CopyTiming, DeviceSummary, DiagnosisEntry, Result, TimingResult


def graded(tier="gold", fraction=0.97):
    t = TimingResult(shape=[16384, 1024], kernel="biasGeluFused", byte_model="2 floats per element", bytes_moved=134217728, samples=120,
                     stop_reason="converged", seconds=1.2, submission_ms=0.0370, submission_gbps=3627.5,
                     floor_kind="copy_vec4", floor_gbps=3735.0,
                     copies=[CopyTiming("copy_scalar", 0.0551, 2436.0, 134217728),
                             CopyTiming("copy_vec4", 0.03594, 3735.0, 134217728),
                             CopyTiming("memcpy", 0.03597, 3732.0, 134217728)],
                     fraction=fraction, fraction_ci=[fraction - 0.004, fraction + 0.004], informational_kind="copy_scalar",
                     informational_fraction=1.49, chain_ms=0.09, chain_gbps=3728.0, chain_bytes=335544320, chain_title="biasGeluFused + addResidual")
    return Result(exercise="bias_gelu_fused", submission={"path": "s.cu", "sha256": "ab" * 32}, backend="cuda",
                  status="graded", grader_version="0.1.0", correct=True, tier=tier, fraction=fraction,
                  fraction_ci=t.fraction_ci, gbps=t.submission_gbps, timing=t, device=DeviceSummary(name="NVIDIA H200"),
                  cases=[CaseResult("lesson 101x97", [101, 97], "lesson", 0, True, 0, 9797, 0, None, 1e-7, 1e-7)],
                  feedback="Well done.")


def test_markdown_has_the_exercise_row_and_chain_row(rubric):
    md = render_markdown(graded(), rubric)
    assert "| biasGeluFused | 134.2 | 0.0370 | 3627.5 | **0.970** (0.966 to 0.974) |" in md
    assert "| biasGeluFused + addResidual | 335.5 | 0.0900 | 3728.0 |" in md
    assert "Byte model: 2 floats per element, 134.2 MB at 16384 x 1024." in md
    assert "| copy_vec4 (floor) | 134.2 | 0.0359 | 3735.0 | 1.000 |" in md and "**gold**" in md


def test_html_is_self_contained_with_svg_and_escapes_student_text(rubric):
    r = graded()
    r.diagnosis.append(DiagnosisEntry("wrong_values", "<script>alert(1)</script>", "advice"))
    html = render_html(r, rubric)
    assert html.startswith("<!DOCTYPE html>") and "<svg" in html and "gold 0.90" in html
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "http" not in html.split("<svg", 1)[0].split("<style>")[0].replace("http://www.w3.org", "")


def test_chart_geometry_scales_to_the_largest_bar(rubric):
    c = chart(graded(), rubric)
    widths = {b.label: b.width for b in c["bars"]}
    assert max(widths.values()) <= c["width"]
    gold_x = dict((n, x) for n, x, _ in c["lines"])["gold"]
    assert c["left"] < gold_x < c["left"] + c["width"]


def test_text_summary_escapes_markup_and_shows_tier(rubric):
    r = graded(tier="silver", fraction=0.8)
    r.borderline = True
    r.message = "[bold]not markup[/bold]"
    text = render_text(r, rubric)
    assert "tier: SILVER" in text and "borderline" in text and "x floor" in text


def test_backticked_advice_becomes_code_and_stays_escaped(rubric):
    r = graded()
    r.diagnosis.append(DiagnosisEntry("writes_past_output", "m", "guard with `if (col < cols)` <b>now</b>"))
    html = render_html(r, rubric)
    assert "<code>if (col &lt; cols)</code>" in html and "&lt;b&gt;now&lt;/b&gt;" in html


def test_the_html_report_charts_the_fraction_over_the_files_attempts(rubric):
    """Two or more timed attempts: a line of the fraction, a point each, this one last; one
    attempt, or attempts without a fraction (the emulator), draw nothing."""
    from grader.report.history import Attempt
    from grader.report.files import attempts_chart

    def at(fraction, t):
        return Attempt("/s.cu", "ab", t, "graded", True, fraction, None, "cuda")

    tries = [at(0.59, 1.0), at(None, 2.0), at(0.94, 3.0)]
    html = render_html(graded(), rubric, attempts=tries)
    assert html.count('<svg xmlns="http://www.w3.org/2000/svg" class="attempts"') == 1
    assert "0.59" in html.split('class="attempts"')[1] and "0.94" in html.split('class="attempts"')[1]
    geo = attempts_chart(tries)
    (x1, y1, _), (x3, y3, _) = geo["points"]
    assert x3 > x1 and y3 < y1                       # later is right, faster is higher
    assert attempts_chart(tries[:1]) is None and attempts_chart([at(None, 1.0), at(None, 2.0)]) is None
    assert 'class="attempts"' not in render_html(graded(), rubric, attempts=tries[:1])


def test_a_compile_errors_report_lists_every_message_the_summary_promises(tmp_path):
    """A missing brace: the summary names the file in its first line and counts the harness's other
    errors, and report.md and report.html list every compiler message (they showed the same few)."""
    import shutil

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed (CI installs it)")
    from grader.exercises import load_exercise
    from grader.grade.pipeline import grade_submission
    from grader.report.files import write_reports

    rubric = load_exercise("bias_gelu_fused")
    result = grade_submission(Path("submissions/bias_gelu_fused/missing_brace.cu"), rubric=rubric, backend="emulator")
    assert result.status == "compile_error"
    assert result.message.startswith("missing_brace.cu: at the end of the file: error:"), result.message[:200]
    write_reports(result, rubric, tmp_path)
    md, html = (tmp_path / "report.md").read_text(), (tmp_path / "report.html").read_text()
    assert "## Every compiler message" in md and f"Every compiler message ({len(result.build.messages)})" in html
    assert md.count("\n- `") >= len(result.build.messages) > 3


def test_a_grade_without_nvcc_says_what_it_could_not_read(rubric, monkeypatch, tmp_path):
    """Where nvcc is missing the emulator grades, and the report says in one line that what costs speed
    was not read and why (the findings used to vanish without a word: findings [], notes [])."""
    from grader.grade.pipeline import grade_submission
    from grader.report.files import notices
    from grader.toolchain import tools
    from conftest import SUBMISSIONS

    real = tools.locate
    monkeypatch.setattr(tools, "locate", lambda name: None if name == "nvcc" else real(name))
    monkeypatch.setenv("GRADER_CACHE_DIR", str(tmp_path / "cache"))
    result = grade_submission(SUBMISSIONS / "scalar_2d.cu", rubric=rubric, backend="emulator")
    assert result.status == "graded" and result.correct, result.message
    assert result.sass is not None and "nvcc is not installed here" in result.sass.unavailable
    said = [n for n in notices(result) if "costs speed" in n]
    assert len(said) == 1 and "nvcc is not installed here" in said[0], notices(result)
