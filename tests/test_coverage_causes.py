"""Why elements are never written, read from the launch (verdict/coverage.py): the corpus's four
kernels are found with their line, and the same kernels made right (the division rounded up, a
default that launches, a loop by blockDim), or a grid-stride kernel whose grid divides down, are not."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.core.source import read_submission
from grader.verdict.coverage import block_too_small, grid_rounds_down, no_launch, tail_start

DATA = Path(__file__).resolve().parent / "data" / "mistakes"

FOUND = [
    ("rope_half_split/blocks_rounded_down.cu", grid_rounds_down, 22, "`pairs / 256` rounds down"),
    ("bias_gelu_fused/rows_per_thread_grid.cu", grid_rounds_down, 29, "`rows / ROWS` rounds down"),
    ("rope_half_split/template_dispatch_missing.cu", no_launch, 36, "launches no kernel"),
    ("gelu_sum/block_per_row_fixed_threads.cu", block_too_small, 16, "each block has 128 threads"),
    ("bias_gelu_fused/flat_float4_tail.cu", tail_start, 26, "the scalar tail starts at n4, the number of float4s"),
]

RIGHT = [
    ("bias_gelu_fused/flat_float4_tail.cu", tail_start, "const int i = n4 + tid;", "const int i = n4 * 4 + tid;"),
    ("rope_half_split/blocks_rounded_down.cu", grid_rounds_down,
     "int blocks = pairs / 256 + (pairs < 256 ? 1 : 0);", "int blocks = (pairs + 255) / 256;"),
    ("bias_gelu_fused/rows_per_thread_grid.cu", grid_rounds_down, "rows / ROWS);", "(rows + ROWS - 1) / ROWS);"),
    ("rope_half_split/template_dispatch_missing.cu", no_launch, "default: break;",
     "default: run<32>(in, cosTab, sinTab, out, rows, heads, seq, stream); break;"),
    ("gelu_sum/block_per_row_fixed_threads.cu", block_too_small,
     "    const int d = threadIdx.x;\n    if (d >= D) return;\n    float acc = 0.0f;\n"
     "    for (int r = 0; r < R; ++r) acc += gelu(x[((size_t)r * B + b) * D + d]);\n"
     "    out[(size_t)b * D + d] = acc;",
     "    for (int d = threadIdx.x; d < D; d += blockDim.x) {\n        float acc = 0.0f;\n"
     "        for (int r = 0; r < R; ++r) acc += gelu(x[((size_t)r * B + b) * D + d]);\n"
     "        out[(size_t)b * D + d] = acc;\n    }"),
]


@pytest.mark.parametrize("name, finder, line, words", FOUND, ids=[f[0] for f in FOUND])
def test_the_launch_that_leaves_elements_unwritten_is_found(name, finder, line, words):
    found = finder(read_submission(DATA / name, launcher=""))
    assert found is not None and found.line == line and words in found.text


@pytest.mark.parametrize("name, finder, wrong, right", RIGHT, ids=[r[0] for r in RIGHT])
def test_the_same_launch_made_right_is_not(tmp_path, name, finder, wrong, right):
    text = (DATA / name).read_text()
    assert wrong in text
    path = tmp_path / "k.cu"
    path.write_text(text.replace(wrong, right))
    assert finder(read_submission(path, launcher="")) is None


def test_a_grid_stride_kernel_whose_grid_divides_down_is_not_a_grid_too_small():
    # blocks = (n / 4 + 255) / 256, capped: the kernel's loop by gridDim covers every element
    assert grid_rounds_down(read_submission(DATA / "bias_gelu_fused/flat_float4_tail.cu", launcher="")) is None
