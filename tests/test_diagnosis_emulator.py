"""End to end on the CPU emulator (issue 64): a guard one past the end, a stride spelled another
way and a missing barrier are each the FIRST diagnosis, with the student's own line, and their
echoes are gone; every failing check's line says what it found; a map with nothing wrong is said,
not drawn; a lost update the emulator cannot see is said on a CORRECT grade, never silent."""

from __future__ import annotations

from pathlib import Path

import re

import pytest

from grader.exercises import load_exercise
from grader.grade.pipeline import grade_submission
from grader.report.files import render_html, render_markdown, render_text

ROOT = Path(__file__).resolve().parent.parent
GELU = ("#include <cuda_runtime.h>\n"
        "__device__ float geluErf(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678f)); }\n")
KERNEL = ("__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,\n"
          "                              float* __restrict__ out, size_t cols) {\n"
          "    const size_t row = blockIdx.y;\n"
          "    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;\n")  # lines 3-6
FLAT = (GELU + "__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,\n"
        "                              float* __restrict__ out, int cols, size_t n) {\n"
        "    const size_t idx = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;\n"
        "    if (idx <= n) out[idx] = geluErf(x[idx] + bias[idx % cols]);\n"                     # line 6
        "}\n"
        "void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols,\n"
        "                         cudaStream_t stream) {\n"
        "    const size_t n = static_cast<size_t>(rows) * cols;\n"
        "    biasGeluFused<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(x, bias, out, cols, n);\n"
        "}\n")
STRIDE = (GELU + KERNEL +
          "    const size_t rows = gridDim.y;\n"
          "    const float* xr = x + row * rows;\n"                                              # line 8
          "    float* outr = out + row * rows;\n"
          "    if (col < cols) outr[col] = geluErf(xr[col] + bias[col]);\n"
          "}\n")
BARRIER = (GELU + KERNEL +
           "    __shared__ float tile[256];\n"
           "    tile[threadIdx.x] = col < cols ? x[row * cols + col] + bias[col] : 0.0f;\n"      # line 8
           "    const unsigned mirror = blockDim.x - 1 - threadIdx.x;\n"
           "    const size_t mcol = blockIdx.x * static_cast<size_t>(blockDim.x) + mirror;\n"
           "    if (mcol < cols) out[row * cols + mcol] = geluErf(tile[mirror]);\n"              # line 11
           "}\n")


@pytest.fixture(scope="module")
def bias_gelu_rubric():
    return load_exercise("bias_gelu_fused")


def _failing_lines_say_what_they_found(result) -> None:
    for c in result.cases:
        if c.passed is False:
            assert c.first_mismatch or c.note, f"{c.name}: a failing check that says nothing"


@pytest.mark.slow
def test_a_guard_one_past_the_end_is_the_first_diagnosis_with_its_line_and_no_echo(bias_gelu_rubric):
    sample = ROOT / "submissions" / "bias_gelu_fused" / "float4_guard_past_end.cu"
    line = next(n for n, text in enumerate(sample.read_text().splitlines(), 1) if "if (col <= cols)" in text)
    r = grade_submission(sample, rubric=bias_gelu_rubric, backend="emulator")
    assert r.correct is False
    first = r.diagnosis[0]
    assert first.code == "guard_past_end" and first.message.startswith(f"line {line}: `if (col <= cols)`")
    assert "write `col < cols`" in first.message
    assert not {"order_dependent", "writes_past_output"} & {d.code for d in r.diagnosis}     # echoes dropped
    _failing_lines_say_what_they_found(r)
    text = render_text(r, bias_gelu_rubric, colour=False)
    assert "wrong alike" not in text and "every element is right" in text
    checks = [l for l in text.splitlines() if l.startswith("  [red]x[/red] ")]
    assert checks and all(not l.rstrip().endswith(":") for l in checks)       # each failing check says what it found
    html = render_html(r, bias_gelu_rubric)
    assert "every element is right" in html and "around the first wrong one" not in html
    caption = re.search(r"<figcaption>(.*?)</figcaption>", html)     # under the map, what a clean one means
    assert caption and "Every element of out is right" in caption.group(1), html[:2000]
    assert re.search(r"wrote \d+ floats? past its end", caption.group(1)), caption.group(1)
    md = render_markdown(r, bias_gelu_rubric)
    first_wrong = next(l for l in md.splitlines() if l.startswith("First wrong element:"))
    assert "written past the end of out" in first_wrong


@pytest.mark.slow
@pytest.mark.parametrize("source, code, line", [(FLAT, "guard_past_end", 6), (STRIDE, "row_stride", 8),
                                                (BARRIER, "race_missing_barrier", 11)],
                         ids=["flat_le", "stride_pointer", "mirror_no_barrier"])
def test_each_mistake_is_the_first_diagnosis_with_its_line(tmp_path, bias_gelu_rubric, source, code, line):
    p = tmp_path / "k.cu"
    p.write_text(source)
    r = grade_submission(p, rubric=bias_gelu_rubric, backend="emulator")
    assert r.correct is False
    assert r.diagnosis[0].code == code, [d.code for d in r.diagnosis]
    assert r.diagnosis[0].message.startswith((f"line {line}: `", f"line {line} (`"))
    assert not {"order_dependent", "wrong_values", "reads_past_input", "writes_past_output"} & {
        d.code for d in r.diagnosis}
    _failing_lines_say_what_they_found(r)


@pytest.mark.slow
def test_a_lost_update_the_emulator_cannot_see_is_said_on_a_correct_grade():
    rubric = load_exercise("gelu_sum")
    r = grade_submission(ROOT / "submissions" / "gelu_sum" / "racy_accumulate.cu", rubric=rubric, backend="emulator")
    assert r.correct is True
    (d,) = r.diagnosis
    assert d.code == "race_lost_update" and d.message.startswith("line 10: `out[i % n] +=")
    assert "atomicAdd" in d.message and "emulator" in d.message and "GPU" in d.message
    text = render_text(r, rubric, colour=False)
    assert "caution: race_lost_update" in text


@pytest.mark.slow
def test_a_modelled_bound_mistake_carries_the_line_of_its_guard():
    """gelu_sum's missing_last_slice (r < R - 1), named by its model, with the loop's line: the
    guard whose right comparison (r < R) the rubric's advice for it writes out."""
    rubric = load_exercise("gelu_sum")
    r = grade_submission(ROOT / "submissions" / "gelu_sum" / "missing_last_slice.cu", rubric=rubric,
                         backend="emulator")
    assert r.diagnosis[0].code == "missing_last_slice"
    assert r.diagnosis[0].message.startswith("line 11: `for (int r = 0; r < R - 1; ++r)` stops one short")
