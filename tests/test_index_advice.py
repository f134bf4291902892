"""What the grader says about an index that runs past the end: the wrong row or column stride named
from the file with its line (verdict/checks.index_stride), and no advice to add code the file
already holds (verdict.advice_for). A correct vectorised kernel's `col4 * 4` is never a stride
mistake."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grader.core.source import Submission, read_submission
from grader.verdict import advice_for
from grader.verdict.checks import index_stride

ROOT = Path(__file__).resolve().parent.parent
HEAD = ("__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,\n"
        "                              float* __restrict__ out, size_t cols) {\n")


def kernel(tmp_path: Path, body: str) -> Submission:
    p = tmp_path / "k.cu"
    p.write_text(HEAD + body + "}\n")
    return read_submission(p, "")


@pytest.mark.parametrize("body, line", [
    ("  size_t row = blockIdx.y;\n  size_t col = blockIdx.x * blockDim.x + threadIdx.x;\n"
     "  if (col < cols) {\n    size_t i = row * cols + col * sizeof(float);\n    out[i] = x[i] + bias[col];\n  }\n", 6),
    ("  int row = blockIdx.y, c;\n  int col = threadIdx.x + blockDim.x * blockIdx.x;\n"
     "  if (col >= cols) return;\n  if (col < cols) out[row * cols + 4 * col] = x[row * cols + 4 * col];\n", 6),
    ("  unsigned row = blockIdx.y;\n  unsigned col = blockIdx.x * blockDim.x + threadIdx.x;\n  if (col < cols)\n"
     "    out[(row * cols + col) * sizeof(float)] = bias[col];  // bytes\n", 6),
    ("  const size_t r = blockIdx.y;\n  const size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x;\n"
     "  if (j < cols) { out[r * cols + j * 2] = x[r * cols + j * 2] + bias[j]; }\n", 5),
])
def test_a_column_scaled_into_the_index_is_a_column_stride_with_its_line(tmp_path, body, line):
    found = index_stride(kernel(tmp_path, body))
    assert found is not None and found[0] == "col_stride"
    assert found[1].startswith(f"line {line} (`")


@pytest.mark.parametrize("body", [
    # float4: the vector index is compared with cols / 4, and scaled by 4 into the element index
    "  size_t row = blockIdx.y;\n  size_t col4 = blockIdx.x * blockDim.x + threadIdx.x;\n  if (col4 < cols / 4) {\n"
    "    size_t i = row * cols + col4 * 4;\n    out[i] = x[i] + bias[col4 * 4];\n  }\n",
    "  size_t row = blockIdx.y;\n  size_t v = blockIdx.x * blockDim.x + threadIdx.x;\n  if (v < cols >> 2) {\n"
    "    out[row * cols + v * 4] = x[row * cols + v * 4];\n  }\n",
    # the vector index guarded by its scaled value
    "  size_t row = blockIdx.y;\n  size_t c = (blockIdx.x * blockDim.x + threadIdx.x);\n  if (c * 4 < cols) {\n"
    "    out[row * cols + c * 4] = x[row * cols + c * 4];\n  }\n",
    # a right index, and a multiplication elsewhere on the line
    "  size_t row = blockIdx.y;\n  size_t col = blockIdx.x * blockDim.x + threadIdx.x;\n  if (col < cols) {\n"
    "    float v = x[row * cols + col] * 2.0f;\n    out[row * cols + col] = v * 4 + bias[col];\n  }\n",
    # the scale in a comment only
    "  size_t row = blockIdx.y;\n  size_t col = blockIdx.x * blockDim.x + threadIdx.x;\n  if (col < cols) {\n"
    "    out[row * cols + col] = x[row * cols + col];  // not col * 4\n  }\n",
])
def test_a_correct_index_is_no_stride_mistake(tmp_path, body):
    assert index_stride(kernel(tmp_path, body)) is None


def test_the_row_stride_is_found_before_a_column_scale(tmp_path):
    body = ("  size_t row = blockIdx.y;\n  size_t col = blockIdx.x * blockDim.x + threadIdx.x;\n  if (col < cols) {\n"
            "    size_t i = row * blockDim.x + col;\n    out[i] = x[i] + bias[col];\n  }\n")
    code, text = index_stride(kernel(tmp_path, body))
    assert code == "row_stride" and "blockDim.x" in text


GUARD = "Your kernel read past the end of an input (x or bias). Guard with `if (col < cols)` and index the bias."


def test_advice_to_add_a_guard_the_file_has_says_so_with_the_line():
    source = "__global__ void k() {\n  size_t col = 1;\n  if(col<cols) {\n  }\n}\n"
    said = advice_for(GUARD, source)
    assert said.startswith("Your file already has `if (col < cols)` (line 3), so adding it is not the fix")
    assert "Guard with" not in said
    assert "Your kernel read past the end of an input" in said


@pytest.mark.parametrize("source", [
    "__global__ void k() {\n  size_t col = 1;\n  out[col] = 1;\n}\n",                 # no guard
    "__global__ void k() {\n  // if (col < cols)\n  out[col] = 1;\n}\n",                # only in a comment
    "__global__ void k() {\n  if (col <= cols) out[col] = 1;\n}\n",                    # another guard
])
def test_advice_is_given_as_written_where_the_file_lacks_the_code(source):
    assert advice_for(GUARD, source) == GUARD


def test_advice_that_quotes_no_code_is_unchanged():
    assert advice_for("Add bias[col] to x before the GELU.", "if (col < cols) {}") == "Add bias[col] to x before the GELU."


def _submit(path: Path, tmp_path: Path) -> dict:
    """`grader submit --format json`'s document, in process (the grade's words are the point, not the process)."""
    from click.testing import CliRunner

    from grader.cli import cli

    r = CliRunner().invoke(cli, ["submit", str(path), "--backend", "emulator", "--format", "json", "-q",
                                 "--report-dir", str(tmp_path / "r")])
    return json.loads(r.stdout)


def test_a_guarded_kernel_writing_one_past_is_not_told_to_add_its_guard(tmp_path):
    p = tmp_path / "plus_one.cu"
    p.write_text("#include <cuda_runtime.h>\n" + HEAD +
                 "  size_t row = blockIdx.y;\n  size_t col = blockIdx.x * blockDim.x + threadIdx.x;\n"
                 "  if (col < cols) {\n    size_t i = row * cols + col + 1;\n    float v = x[i - 1] + bias[col];\n"
                 "    out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));\n  }\n}\n")
    doc = _submit(p, tmp_path)
    assert doc["status"] == "graded" and doc["correct"] is False
    past = [d for d in doc["diagnosis"] if d["code"] == "writes_past_output"]
    assert past, doc["diagnosis"]
    assert past[0]["advice"].startswith("Your file already has `if (col < cols)` (line 6)")


def test_the_column_stride_sample_names_only_the_stride(tmp_path):
    doc = _submit(ROOT / "submissions" / "bias_gelu_fused" / "col_stride_sizeof.cu", tmp_path)
    assert [d["code"] for d in doc["diagnosis"]] == ["col_stride"]
    assert "line 10 (`size_t i = row * cols + col * sizeof(float);`)" in doc["diagnosis"][0]["message"]
