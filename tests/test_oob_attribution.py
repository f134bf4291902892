"""An access past a buffer attributed to the index that ran past (issue 71): the faulting thread,
the value each index held there and the guard the file lacks (`row < rows`), never 'add the guard
you already have'; a row stride followed through a variable, a parameter, a struct field or a
macro to the launch's padded width it holds."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from grader.core.backend import EMULATOR
from grader.core.source import read_submission
from grader.exercises import load_exercise
from grader.grade.pipeline import grade_submission
from grader.verdict.causes import index_strides
from grader.verdict.cexpr import evaluate

GELU = ("#include <cuda_runtime.h>\n"
        "__device__ float g(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678f)); }\n")

# A 2D tile of 32 x 8 threads that guards the column and not the row.
TILE_32x8 = GELU + """__global__ void biasGeluFused(const float* x, const float* bias, float* out, int rows, int cols) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (col < cols) {
        out[row * cols + col] = g(x[row * cols + col] + bias[col]);
    }
}
void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols, cudaStream_t s) {
    dim3 block(32, 8);
    dim3 grid((cols + 31) / 32, (rows + 7) / 8);
    biasGeluFused<<<grid, block, 0, s>>>(x, bias, out, rows, cols);
}
"""
# 16 x 16 with the tile's side a macro, the index in a variable, an early return for the column.
TILE_16_MACRO = GELU + """#define TILE 16
__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, int rows, int cols) {
    const int c = blockIdx.x * TILE + threadIdx.x;
    const int r = blockIdx.y * TILE + threadIdx.y;
    if (c >= cols) return;
    const size_t i = (size_t)r * cols + c;
    out[i] = g(x[i] + bias[c]);
}
void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols, cudaStream_t s) {
    biasGeluFused<<<dim3((cols + TILE - 1) / TILE, (rows + TILE - 1) / TILE), dim3(TILE, TILE), 0, s>>>(
        x, bias, out, rows, cols);
}
"""
# Each thread loops over four rows of its block's band; the loop's counter is bounded, the row is not.
ROW_LOOP = GELU + """__global__ void biasGeluFused(const float* x, const float* bias, float* out, int rows, int cols) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col < cols) {
        for (int k = 0; k < 4; ++k) {
            int row = blockIdx.y * 4 + k;
            out[row * cols + col] = g(x[row * cols + col] + bias[col]);
        }
    }
}
void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols, cudaStream_t s) {
    biasGeluFused<<<dim3((cols + 255) / 256, (rows + 3) / 4), 256, 0, s>>>(x, bias, out, rows, cols);
}
"""
# A grid-stride loop over rows bounded by the grid's rows, not the tensor's.
ROW_STRIDE_LOOP = GELU + """__global__ void biasGeluFused(const float* x, const float* bias, float* out, int rows, int cols) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int step = gridDim.y * blockDim.y;
    for (int row = blockIdx.y * blockDim.y + threadIdx.y; row < step; row += step) {
        if (col < cols) out[row * cols + col] = g(x[row * cols + col] + bias[col]);
    }
}
void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols, cudaStream_t s) {
    biasGeluFused<<<dim3((cols + 31) / 32, (rows + 7) / 8), dim3(32, 8), 0, s>>>(x, bias, out, rows, cols);
}
"""


@pytest.fixture(scope="module")
def bias_gelu_rubric():
    return load_exercise("bias_gelu_fused")


@pytest.mark.slow
@pytest.mark.parametrize("source, row, guard, has", [
    (TILE_32x8, "row", "row < rows", "col < cols"),
    (TILE_16_MACRO, "r", "r < rows", "c >= cols"),
    (ROW_LOOP, "row", "row < rows", "col < cols"),
    (ROW_STRIDE_LOOP, "row", "row < rows", "row < step"),
], ids=["tile_32x8", "tile_16x16_macro", "rows_per_thread_loop", "grid_stride_rows_wrong_bound"])
def test_a_row_never_compared_with_rows_is_named_with_the_guard_it_lacks(tmp_path, bias_gelu_rubric, source, row,
                                                                          guard, has):
    p = tmp_path / "k.cu"
    p.write_text(source)
    r = grade_submission(p, rubric=bias_gelu_rubric, backend="emulator")
    assert r.correct is False
    first = r.diagnosis[0]
    assert first.code == "reads_past_input", [(d.code, d.message) for d in r.diagnosis]
    # the thread that ran past, the value its row held, and the buffer's extent
    assert "thread " in first.message and " of block " in first.message, first.message
    assert f"{row} = " in first.message and "x holds 101 (rows) x 97 (cols)" in first.message, first.message
    assert f"write `{guard}`" in first.message or f"`if ({guard} &&" in first.message or \
        f"The missing guard is {guard}" in first.message, first.message
    # the advice never points away from the fix with the guard the file already has
    for d in r.diagnosis:
        assert "adding it is not the fix" not in d.advice, d.advice
    assert guard in first.advice or not first.advice, first.advice


def _scanned(tmp_path: Path, text: str):
    p = tmp_path / "k.cu"
    p.write_text(text)
    return read_submission(p, "launchBiasGeluFused")


STRIDE_HEAD = GELU + "struct Shape { size_t cols; size_t ld; };\n"
STRIDES = {
    "variable": """__global__ void biasGeluFused(const float* x, const float* bias, float* out, size_t cols) {
    size_t col = blockIdx.x * blockDim.x + threadIdx.x;
    size_t row = blockIdx.y;
    size_t width = gridDim.x * blockDim.x;
    if (col < cols) out[row * width + col] = g(x[row * width + col] + bias[col]);
}
""",
    "parameter": """__global__ void biasGeluFused(const float* x, const float* bias, float* out, size_t cols, size_t ld) {
    size_t col = blockIdx.x * blockDim.x + threadIdx.x;
    size_t row = blockIdx.y;
    if (col < cols) out[row * ld + col] = g(x[row * ld + col] + bias[col]);
}
void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols, cudaStream_t s) {
    dim3 grid((cols + 255) / 256, rows);
    size_t padded = grid.x * 256;
    biasGeluFused<<<grid, 256, 0, s>>>(x, bias, out, cols, padded);
}
""",
    "struct_field": """__global__ void biasGeluFused(const float* x, const float* bias, float* out, Shape shape) {
    size_t col = blockIdx.x * blockDim.x + threadIdx.x;
    size_t row = blockIdx.y;
    if (col < shape.cols) out[row * shape.ld + col] = g(x[row * shape.ld + col] + bias[col]);
}
void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols, cudaStream_t s) {
    Shape shape;
    shape.cols = cols;
    shape.ld = ((cols + 255) / 256) * 256;
    biasGeluFused<<<dim3((cols + 255) / 256, rows), 256, 0, s>>>(x, bias, out, shape);
}
""",
    "macro": """#define ROW_PITCH (gridDim.x * blockDim.x)
__global__ void biasGeluFused(const float* x, const float* bias, float* out, size_t cols) {
    size_t col = blockIdx.x * blockDim.x + threadIdx.x;
    size_t row = blockIdx.y;
    if (col < cols) out[row * ROW_PITCH + col] = g(x[row * ROW_PITCH + col] + bias[col]);
}
""",
}


@pytest.mark.parametrize("spelling", sorted(STRIDES))
def test_a_padded_row_stride_is_followed_through_its_spelling(tmp_path, spelling):
    sub = _scanned(tmp_path, STRIDE_HEAD + STRIDES[spelling])
    found = index_strides(sub, row_length="cols", dims=("rows", "cols"))
    assert found is not None and found[0] == "row_stride", found
    assert "padded width" in found[1] and "1024 where cols is 1000" in found[1], found[1]


@pytest.mark.parametrize("right", [
    "    size_t width = cols4 * 4;\n",
    "    size_t width = cols;\n",
    "    size_t width = (cols / 4) * 4 + cols % 4;\n",
], ids=["cols4_times_4", "cols", "rebuilt"])
def test_a_stride_that_is_the_row_length_in_any_spelling_is_not_named(tmp_path, right):
    text = GELU + ("__global__ void biasGeluFused(const float* x, const float* bias, float* out, size_t cols) {\n"
                   "    size_t cols4 = cols / 4;\n"
                   "    size_t col = blockIdx.x * blockDim.x + threadIdx.x;\n"
                   "    size_t row = blockIdx.y;\n" + right +
                   "    if (col < cols) out[row * width + col] = g(x[row * width + col] + bias[col]);\n}\n")
    assert index_strides(_scanned(tmp_path, text), row_length="cols", dims=("rows", "cols")) is None


def test_the_evaluator_reads_c_integer_arithmetic_and_nothing_else():
    env = {"blockIdx_y": 12, "blockDim_y": 8, "threadIdx_y": 5, "cols": 97}
    assert evaluate("(size_t)blockIdx.y * blockDim.y + threadIdx.y", env) == 101
    assert evaluate("static_cast<int>(cols) / 4", env) == 24
    assert evaluate("-7 / 2", {}) == -3 and evaluate("-7 % 2", {}) == -1      # C truncates toward zero
    assert evaluate("min(cols, 3u)", env) == 3
    assert evaluate("__import__('os')", env) is None and evaluate("x[1]", env) is None
    assert evaluate("cols > 3 ? 1 : 2", env) is None and evaluate("unknown + 1", env) is None


# ---------------------------------------------------------------------------
# The same outcome and first diagnosis on one core and on every core
# ---------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
# A float4 path that reads bias4[row], taken only at the timed shape (16384 x 1024): its launch is
# spread over OS threads, and the blocks past bias's end fault on several at once. On two cores it
# was "a wild pointer" (crashed), on one "read past the end of bias" (incorrect).
BIAS4_BY_ROW = GELU + """__global__ void biasGeluFused(const float* x, const float* bias, float* out, int cols) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col < cols) { size_t i = (size_t)blockIdx.y * cols + col; out[i] = g(x[i] + bias[col]); }
}
__global__ void k4(const float4* x, const float4* bias4, float4* out, int cols4) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y;
    if (c < cols4) {
        size_t i = (size_t)row * cols4 + c;
        float4 v = x[i], b = bias4[row];
        float4 r; r.x = g(v.x + b.x); r.y = g(v.y + b.y); r.z = g(v.z + b.z); r.w = g(v.w + b.w);
        out[i] = r;
    }
}
void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols, cudaStream_t s) {
    if (cols % 4 == 0 && rows >= 4096) {
        int cols4 = cols / 4;
        k4<<<dim3((cols4 + 255) / 256, rows), 256, 0, s>>>((const float4*)x, (const float4*)bias, (float4*)out, cols4);
    } else {
        biasGeluFused<<<dim3((cols + 255) / 256, rows), 256, 0, s>>>(x, bias, out, cols);
    }
}
"""


def _graded(path: Path, threads: int, check: bool):
    return grade_submission(path, rubric=load_exercise("bias_gelu_fused"),
                            backend=dataclasses.replace(EMULATOR, thread_check=check), emulator_threads=threads)


@pytest.mark.slow
def test_the_thread_check_passes_a_spread_fault_and_ends_a_grade_whose_bytes_change_with_the_cores(tmp_path):
    """Every sample and corpus file is graded with the thread check (tests/test_samples.py,
    tests/test_mistakes_corpus.py): each call a thread count could change runs on one OS thread and
    on two, from the same starting outputs. A fault spread over threads is the same on both (the earliest
    block's); a kernel whose blocks read what earlier blocks of the same launch wrote gives other
    bytes on two threads than on one, and the check says so (the grade ends, naming the case)."""
    path = tmp_path / "bias4_by_row.cu"
    path.write_text(BIAS4_BY_ROW)
    checked = _graded(path, 2, True)
    assert (checked.status, checked.diagnosis[0].code) == ("graded", "reads_past_input")
    assert "ThreadCountChanged" not in checked.output.stderr
    chained = tmp_path / "reads_the_row_above.cu"
    chained.write_text(READS_THE_ROW_ABOVE)
    changed = _graded(chained, 2, True)
    assert "ThreadCountChanged: timed 16384x1024" in changed.output.stderr, changed.output.stderr
    assert _graded(chained, 2, False).status == "graded"          # without the check: graded as ever


# Each row adds 0 * (the row above's output), which is NaN where the row above is not written yet:
# in order on one thread never, on two threads where another thread's chunk starts.
READS_THE_ROW_ABOVE = """#include <cuda_runtime.h>
__global__ void biasGeluFused(const float* x, const float* bias, float* out, size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col < cols) {
        const size_t i = blockIdx.y * cols + col;
        const float v = x[i] + bias[col];
        float carry = 0.0f;
        if (blockIdx.y > 0) carry = out[i - cols] - out[i - cols];
        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f)) + carry;
    }
}
"""


# ---------------------------------------------------------------------------
# A read past a table or the bias, said with what its index holds
# ---------------------------------------------------------------------------

ROPE_HEAD = """#include <cuda_runtime.h>
__global__ void ropeHalfSplit(const float* __restrict__ in, const float* __restrict__ cosTab,
                              const float* __restrict__ sinTab, float* __restrict__ out, size_t pairs,
                              int halfDim, int heads, int seq) {
    const size_t p = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (p >= pairs) return;
    const size_t half = halfDim;
    const size_t row = p / half;
    const size_t j = p - row * half;
    const size_t pos = (row / heads) % seq;
    const size_t lo = row * 2 * half + j;
"""
ROPE_TAIL = """    out[lo] = in[lo] * c - in[lo + half] * s;
    out[lo + half] = in[lo] * s + in[lo + half] * c;
}
"""
# the tables' rows stepped by the head dimension (line 12)
ROPE_TABLE_STRIDE = ROPE_HEAD + """    const float c = cosTab[pos * 2 * half + j];
    const float s = sinTab[pos * 2 * half + j];
""" + ROPE_TAIL
# the lesson's kernel, launched with headDim where the kernel's parameter is halfDim (line 20)
ROPE_LAUNCHER_HEADDIM = ROPE_HEAD + """    const float c = cosTab[pos * half + j];
    const float s = sinTab[pos * half + j];
""" + ROPE_TAIL + """void launchRope(const float* in, const float* cosTab, const float* sinTab, float* out, int batch,
                int seq, int heads, int headDim, cudaStream_t stream) {
    const size_t pairs = (size_t)batch * seq * heads * (headDim / 2);
    ropeHalfSplit<<<(unsigned)((pairs + 255) / 256), 256, 0, stream>>>(in, cosTab, sinTab, out, pairs, headDim, heads, seq);
}
"""


@pytest.mark.slow
@pytest.mark.parametrize("source, line, says", [
    (ROPE_TABLE_STRIDE, 12, "pos is 9 there, within seq, but it steps by 2 * half = 64, and cosTab's rows are "
                            "halfDim = 32 apart: write pos * halfDim"),
    (ROPE_LAUNCHER_HEADDIM, 12, "The kernel's halfDim is 64 here: the launch (line 20: "),
], ids=["table_stride_head_dim", "launcher_passes_head_dim"])
def test_a_read_past_a_table_says_what_its_index_holds(tmp_path, source, line, says):
    p = tmp_path / "rope.cu"
    p.write_text(source)
    r = grade_submission(p, rubric=load_exercise("rope_half_split"), backend="emulator")
    assert r.correct is False
    first = r.diagnosis[0]
    assert first.code == "reads_past_input" and first.message.startswith(f"line {line}: `const float c = cosTab["), \
        first.message
    assert "read past the end of cosTab: thread " in first.message and says in first.message, first.message


@pytest.mark.slow
def test_a_bias_read_by_the_row_is_said_as_a_row_index_on_any_core_count(tmp_path, bias_gelu_rubric):
    p = tmp_path / "bias4.cu"
    p.write_text(BIAS4_BY_ROW)
    r = grade_submission(p, rubric=bias_gelu_rubric, backend="emulator")
    assert r.status == "graded" and r.correct is False, (r.status, r.message)
    first = r.diagnosis[0]
    assert first.code == "reads_past_input", first.message
    assert "row is 256 there: it counts rows" in first.message and "one value per column" in first.message, \
        first.message
