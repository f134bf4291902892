"""On a GPU (synthetic frames, no GPU needed): a guard one past the end whose writes land in the
guards is named with its line; a missing barrier is named first where the outputs are wrong, and
said as what this run could not see where they came out right; a correct file gets nothing."""

from pathlib import Path

from test_verdict import judge, output_frame, small, timing_frame

SAMPLES = Path(__file__).resolve().parent.parent / "submissions" / "bias_gelu_fused"


def test_a_guard_one_past_the_end_on_a_gpu_is_named_with_its_line(rubric):
    r = small(rubric)
    result = judge(r, lambda c, ref: [output_frame(c, ref, r.checks.guard_floats, past=True)],
                   timing_frame([0.0375] * 60), path=SAMPLES / "float4_guard_past_end.cu")
    assert result.correct is False
    assert [d.code for d in result.diagnosis] == ["guard_past_end"]
    assert result.diagnosis[0].message.startswith("line 14: `if (col <= cols)`") and result.diagnosis[0].advice
    assert result.tier is None


def test_a_missing_barrier_is_the_first_diagnosis_where_the_outputs_are_wrong(rubric):
    r = small(rubric)
    result = judge(r, lambda c, ref: [output_frame(c, ref, r.checks.guard_floats, corrupt=True)],
                   timing_frame([0.0375] * 60), path=SAMPLES / "shared_race.cu")
    assert result.correct is False
    assert [d.code for d in result.diagnosis] == ["race_missing_barrier"]          # wrong_values is its echo
    assert result.diagnosis[0].message.startswith("line 16: `const float v = tile[src];`")


def test_a_race_a_correct_gpu_run_did_not_show_is_said_not_silent(rubric):
    r = small(rubric)
    result = judge(r, lambda c, ref: [output_frame(c, ref, r.checks.guard_floats)], timing_frame([0.0375] * 60),
                   path=SAMPLES / "shared_race.cu")
    assert result.correct is True and result.tier is not None
    (d,) = result.diagnosis
    assert d.code == "race_missing_barrier" and "another run, or another GPU" in d.message


def test_a_correct_file_with_correct_outputs_gets_no_diagnosis(rubric):
    r = small(rubric)
    result = judge(r, lambda c, ref: [output_frame(c, ref, r.checks.guard_floats)], timing_frame([0.0375] * 60),
                   path=SAMPLES / "float4_launcher.cu")
    assert result.correct is True and result.diagnosis == []


def test_a_run_that_crashed_after_its_checks_says_what_they_named(rubric):
    """On a GPU row_stride_rows.cu's checks name the stride, then its timed shape faults: the
    summary says the crash, and the cause the checks named, with its line."""
    from grader.core.results import DiagnosisEntry, Result
    from grader.report.files import render_text

    r = Result(exercise="bias_gelu_fused", submission={"path": "k.cu"}, backend="cuda", status="crashed",
               grader_version="0", message="RuntimeError: CUDA error: an illegal memory access was encountered")
    r.diagnosis = [DiagnosisEntry("row_stride", "line 15 (`const size_t i = (size_t)row * rows + col;`) steps from "
                                  "row to row by rows", "", "lesson 101x97")]
    text = render_text(r, rubric, colour=False)
    assert "illegal memory access" in text and "the checks before it: row_stride" in text
    assert "line 15 (`const size_t i = (size_t)row * rows + col;`)" in text
