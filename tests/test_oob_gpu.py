"""On a GPU (synthetic frames, no GPU needed): a launch that stops with an illegal address, where
the source shows an access running past a grader's buffer at that case's shape, is the student's
reads_past_input at its line, graded incorrect as the emulator grades the same file, not an
unexplained crash; where nothing in the source runs past a buffer, the crash stays a crash."""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor

import pytest

from grader.core.results import Result
from grader.exercises import load_exercise
from grader.exercises.plan import plan_cases, timed_cases
from grader.exercises.rubric import CaseSpec, default_launch, dims_values
from grader.run import protocol
from grader.run.sandbox import CappedOutput, ChildRun
from grader.toolchain.outcome import BuildResult
from test_verdict import read_run, reference_for

ILLEGAL = "CUDA error: an illegal memory access was encountered"

# RoPE's tables read with the head dimension as their row stride: twice as far as they reach.
ROPE_HEADDIM = """#include <cuda_runtime.h>
__global__ void ropeHalfSplit(const float* __restrict__ in, const float* __restrict__ cosTab,
                              const float* __restrict__ sinTab, float* __restrict__ out, size_t pairs,
                              int halfDim, int heads, int seq) {
    const size_t p = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (p >= pairs) return;
    const size_t headDim = 2 * halfDim;
    const size_t row = p / halfDim;
    const size_t j = p - row * halfDim;
    const size_t pos = (row / heads) % seq;
    const size_t lo = row * headDim + j;
    const float c = cosTab[pos * headDim + j];
    const float s = sinTab[pos * headDim + j];
    out[lo] = in[lo] * c - in[lo + halfDim] * s;
    out[lo + halfDim] = in[lo] * s + in[lo + halfDim] * c;
}
"""
# The lesson's kernel, right: an illegal address from it is no access of its own past a buffer.
ROPE_RIGHT = ROPE_HEADDIM.replace("cosTab[pos * headDim + j]", "cosTab[pos * halfDim + j]").replace(
    "sinTab[pos * headDim + j]", "sinTab[pos * halfDim + j]")
# A 32x8 tile guarding only the column, through its own launcher (the kernel's pointers by another name).
TILE = """#include <cuda_runtime.h>
__global__ void tile(const float* a, const float* b, float* o, int rows, int cols) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (col < cols) {
        float v = a[row * cols + col] + b[col];
        o[row * cols + col] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
}
void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols, cudaStream_t s) {
    dim3 block(32, 8);
    dim3 grid((cols + 31) / 32, (rows + 7) / 8);
    tile<<<grid, block, 0, s>>>(x, bias, out, rows, cols);
}
"""


def _crashed_on_first_case(rubric, path, kernel: str, grid=None, block=None):
    """The verdict on a GPU run whose first check's launch stopped the context (the run ends there,
    as the measuring process ends it: no more frames, no done frame)."""
    cases = plan_cases(rubric)
    first = cases[0]
    values = dims_values(rubric, first.dims)
    g, b = default_launch(rubric, values) if grid is None else (grid, block)
    frame = protocol.Frame({"type": "case", "case": first.name, "ok": False, "error": ILLEGAL, "fatal": True,
                            "launches": [{"kernel": kernel, "grid": list(g), "block": list(b), "launches": 1}]}, b"")
    with ThreadPoolExecutor(2) as pool:
        refs = {c.name: pool.submit(reference_for, c, rubric) for c in cases + timed_cases(rubric)}
        run = ChildRun([protocol.Frame({"type": "hello"}, b""), frame], 1, False, 1.0, CappedOutput(64),
                       CappedOutput(64))
        result = Result(exercise=rubric.exercise, submission={}, backend="cuda", status="graded", grader_version="0")
        read_run(run, cases + timed_cases(rubric), refs, rubric, BuildResult(True, None, None, True, 0.0, ""), path,
                 result)
    return result


@pytest.fixture(scope="module")
def rope():
    r = load_exercise("rope_half_split")
    cases = [CaseSpec(dims={"batch": 3, "seq": 17, "heads": 5, "headDim": 64}, inputs="lesson", seeded=False)]
    return dataclasses.replace(r, checks=dataclasses.replace(r.checks, cases=cases, seeds=[1]))


def test_a_table_read_past_its_end_on_a_gpu_is_reads_past_input_at_its_line(tmp_path, rope):
    path = tmp_path / "rope.cu"
    path.write_text(ROPE_HEADDIM)
    result = _crashed_on_first_case(rope, path, "_Z12ropeHalfSplitPKfS0_S0_Pfmiii")
    assert result.status == "graded" and result.correct is False, (result.status, result.message)
    first = result.diagnosis[0]
    assert first.code == "reads_past_input", [(d.code, d.message) for d in result.diagnosis]
    assert first.message.startswith("line 12: `const float c = cosTab[pos * headDim + j];` read past the end of "
                                    "cosTab: thread "), first.message
    assert "cosTab holds 17 (seq) x 32 (halfDim) = 544 floats" in first.message and ILLEGAL in first.message
    assert not any(c.note.startswith("crashed") for c in result.cases)


def test_an_illegal_address_the_source_does_not_explain_stays_a_crash(tmp_path, rope):
    path = tmp_path / "rope.cu"
    path.write_text(ROPE_RIGHT)
    result = _crashed_on_first_case(rope, path, "_Z12ropeHalfSplitPKfS0_S0_Pfmiii")
    assert result.status == "crashed" and ILLEGAL in result.message
    assert not result.diagnosis


def test_a_row_guard_missing_on_a_gpu_is_named_through_the_launcher(tmp_path):
    r = load_exercise("bias_gelu_fused")
    r = dataclasses.replace(r, checks=dataclasses.replace(
        r.checks, cases=[CaseSpec(dims={"rows": 101, "cols": 97}, inputs="lesson", seeded=False)], seeds=[1]))
    path = tmp_path / "tile.cu"
    path.write_text(TILE)
    result = _crashed_on_first_case(r, path, "_Z4tilePKfS0_Pfii", grid=[4, 13, 1], block=[32, 8, 1])
    assert result.status == "graded" and result.correct is False, (result.status, result.message)
    first = result.diagnosis[0]
    assert first.code == "reads_past_input", [(d.code, d.message) for d in result.diagnosis]
    assert "read past the end of x" in first.message and "The missing guard is row < rows" in first.message, \
        first.message
    assert "row < rows" in first.advice and "adding it is not the fix" not in first.advice


def _timing_stopped(rubric, path):
    """A GPU run whose checks passed and whose timing then stopped with an illegal address (the
    measuring process sends a fatal frame for the timing, and no done frame)."""
    from test_verdict import output_frame

    cases, timed = plan_cases(rubric), timed_cases(rubric)
    with ThreadPoolExecutor(2) as pool:
        refs = {c.name: pool.submit(reference_for, c, rubric) for c in cases}
        frames = [protocol.Frame({"type": "hello"}, b"")]
        frames += [output_frame(c, refs[c.name].result(), rubric.checks.guard_floats) for c in cases]
        frames += [protocol.Frame({"type": "fatal", "stage": "timing", "error": f"RuntimeError: {ILLEGAL}"}, b"")]
        run = ChildRun(frames, 1, False, 1.0, CappedOutput(64), CappedOutput(64))
        result = Result(exercise=rubric.exercise, submission={}, backend="cuda", status="graded", grader_version="0")
        read_run(run, cases + timed, refs, rubric, BuildResult(True, None, None, True, 0.0, ""), path, result)
    return result


SAMPLES = __import__("pathlib").Path(__file__).resolve().parent.parent / "submissions"


def test_a_timing_stopped_by_a_stride_past_the_input_names_the_stride_as_the_emulator_does():
    """row_stride_rows.cu: its checks pass on a GPU at their small shapes (the reads land in other
    memory), and the timed shape's rows land 16384 apart: the emulator names the stride (row_stride),
    and so does the GPU now, graded incorrect, not crashed with no cause."""
    r = load_exercise("bias_gelu_fused")
    r = dataclasses.replace(r, checks=dataclasses.replace(
        r.checks, cases=[CaseSpec(dims={"rows": 3, "cols": 5}, inputs="lesson", seeded=False)], seeds=[1]))
    result = _timing_stopped(r, SAMPLES / "bias_gelu_fused" / "row_stride_rows.cu")
    assert result.status == "graded" and result.correct is False, (result.status, result.message)
    assert result.diagnosis[0].code == "row_stride", [(d.code, d.message) for d in result.diagnosis]
    assert result.diagnosis[0].message.startswith("line 15 (`const size_t i = (size_t)row * rows + col;`)")


def test_a_timing_stopped_that_the_source_does_not_explain_stays_a_crash():
    r = load_exercise("bias_gelu_fused")
    r = dataclasses.replace(r, checks=dataclasses.replace(
        r.checks, cases=[CaseSpec(dims={"rows": 3, "cols": 5}, inputs="lesson", seeded=False)], seeds=[1]))
    result = _timing_stopped(r, SAMPLES / "bias_gelu_fused" / "float4_launcher.cu")
    assert result.status == "crashed" and ILLEGAL in result.message
