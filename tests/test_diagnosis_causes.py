"""The cause named with the student's own line (grader/verdict/causes.py, issue 64): each everyday
mistake (a guard one past the end or one short, in every form; a row stride in other spellings; a
lost update; a missing barrier) is found on its line, and no correct idiom is (a grid-stride loop,
a thread's own element, a reduction with barriers, atomicAdd, warp shuffles, a float4 tail), nor
any sample its manifest calls correct."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from grader.core.source import read_submission
from grader.verdict import causes, races

ROOT = Path(__file__).resolve().parent.parent
HEAD = ("#include <cuda_runtime.h>\n"                                                               # line 1
        "__global__ void k(const float* __restrict__ x, const float* __restrict__ bias,\n"         # line 2
        "                  float* __restrict__ out, size_t cols, size_t rows, size_t n) {\n"        # line 3
        "    const size_t row = blockIdx.y;\n"                                                      # line 4
        "    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;\n"      # line 5
        "    const size_t idx = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;\n")     # line 6


def scanned(tmp_path: Path, body: str, head: str = HEAD):
    p = tmp_path / "k.cu"
    p.write_text(head + body + "}\n")
    return read_submission(p, "")


GUARDS = [   # (the body from line 7, code, the line)
    ("    if (col <= cols) out[row * cols + col] = x[row * cols + col];\n", "guard_past_end", 7),
    ("    if (col < cols + 1) {\n        out[row * cols + col] = x[row * cols + col];\n    }\n", "guard_past_end", 7),
    ("    if (!(col > cols)) out[row * cols + col] = x[row * cols + col];\n", "guard_past_end", 7),
    ("    if (col > cols) return;\n    out[row * cols + col] = x[row * cols + col];\n", "guard_past_end", 7),
    ("    if (idx <= n) out[idx] = x[idx];\n", "guard_past_end", 7),
    ("    if (idx < n + 1) out[idx] = x[idx];\n", "guard_past_end", 7),
    ("    if (idx <= (size_t)rows * cols) out[idx] = x[idx];\n", "guard_past_end", 7),
    ("    if (row <= rows && col < cols) out[row * cols + col] = x[row * cols + col];\n", "guard_past_end", 7),
    ("    const size_t c4 = 4 * idx;\n    if (c4 + 3 <= n) {\n        out[c4] = x[c4];\n    }\n", "guard_past_end", 8),
    ("    for (size_t i = idx; i <= n; i += blockDim.x * gridDim.x) out[i] = x[i];\n", "guard_past_end", 7),
    ("    if (col < cols - 1) out[row * cols + col] = x[row * cols + col];\n", "guard_stops_short", 7),
    ("    if (col >= cols - 1) return;\n    out[row * cols + col] = x[row * cols + col];\n", "guard_stops_short", 7),
    ("    if (idx < n - 1) out[idx] = x[idx];\n", "guard_stops_short", 7),
    ("    if (idx <= n - 2) out[idx] = x[idx];\n", "guard_stops_short", 7),
]


@pytest.mark.parametrize("body, code, line", GUARDS)
def test_a_guard_off_by_one_is_found_on_its_line_with_its_fix(tmp_path, body, code, line):
    found = causes.guard_off_by_one(scanned(tmp_path, body))
    assert [c.code for c in found] == [code]
    assert found[0].line == line and found[0].text.startswith(f"line {line}: `")
    assert "write `" in found[0].text                   # the fix, written out


def test_a_flattened_bound_a_whole_row_short_is_named(tmp_path):
    found = causes.guard_off_by_one(scanned(tmp_path, "    if (idx >= (rows - 1) * cols) return;\n    out[idx] = x[idx];\n"))
    assert [c.code for c in found] == ["guard_stops_short"] and "a whole row short" in found[0].text
    assert "write `if (idx >= rows * cols) return;`" in found[0].text


def test_an_index_nothing_compares_is_named_with_the_first_access(tmp_path):
    found = causes.unguarded_index(scanned(tmp_path, "    const size_t i = row * cols + col;\n"
                                                     "    const float v = x[i] + bias[col];\n    out[i] = v;\n"))
    assert found is not None and found.line == 8 and "indexes x with i" in found.text


STRIDES = [
    ("    if (col < cols) out[row * rows + col] = x[row * rows + col];\n", "row_stride", 7, "by rows"),
    ("    if (col < cols) {\n        const size_t i = (size_t)row * rows + col;\n        out[i] = x[i];\n    }\n",
     "row_stride", 8, "by rows"),
    ("    const size_t stride = rows;\n    if (col < cols) out[row * stride + col] = x[row * stride + col];\n",
     "row_stride", 8, "stride (which holds rows)"),
    ("    const float* xr = x + row * rows;\n    if (col < cols) out[row * cols + col] = xr[col];\n", "row_stride", 7,
     "by rows"),
    ("    if (col < cols) out[static_cast<size_t>(row) * blockDim.x + col] = x[row * cols + col];\n", "row_stride", 7,
     "blockDim.x"),
    ("    if (col < cols) out[col * cols + row] = x[col * cols + row];\n", "col_stride", 7, "by cols"),
    ("    if (col < cols) out[row * cols + col * 4] = x[row * cols + col * 4];\n", "col_stride", 7, "by 4"),
]


@pytest.mark.parametrize("body, code, line, said", STRIDES)
def test_a_wrong_stride_in_any_spelling_is_named_with_its_line(tmp_path, body, code, line, said):
    found = causes.index_strides(scanned(tmp_path, body), row_length="cols", dims=("rows", "cols"))
    assert found is not None and found[0] == code
    assert found[1].startswith(f"line {line} (`") and said in found[1]


LOST = [
    ("    if (idx < n * 4) out[idx % n] += x[idx];\n", 7, "out[idx % n]"),
    ("    const size_t o = idx % n;\n    if (idx < n * 4) out[o] = out[o] + x[idx];\n", 8, "out[o]"),
    ("    const size_t r = idx / cols;\n    out[r] += x[idx];\n", 8, "out[r]"),
    ("    out[blockIdx.x] += x[idx];\n", 7, "out[blockIdx.x]"),
    ("    out[0] += x[idx];\n", 7, "out[0]"),
]


@pytest.mark.parametrize("body, line, said", LOST)
def test_a_plain_add_into_an_element_threads_share_is_a_lost_update(tmp_path, body, line, said):
    found = races.lost_update(scanned(tmp_path, body))
    assert found is not None and found.code == "race_lost_update" and found.line == line
    assert said in found.text and "atomicAdd" in found.text


BARRIERS = [
    ("    __shared__ float t[256];\n    t[threadIdx.x] = x[idx];\n    out[idx] = t[threadIdx.x ^ 1];\n", 9),
    ("    __shared__ float t[256];\n    const unsigned tid = threadIdx.x;\n    t[tid] = x[idx];\n"
     "    const float v = t[blockDim.x - 1 - tid];\n    out[idx] = v;\n", 10),
    ("    __shared__ float s[256];\n    s[threadIdx.x] = x[idx];\n    __syncthreads();\n"
     "    for (unsigned k = blockDim.x / 2; k > 0; k >>= 1) {\n"
     "        if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];\n    }\n"
     "    if (threadIdx.x == 0) out[blockIdx.x] = s[0];\n", 11),
    ("    __shared__ float s[256];\n    s[threadIdx.x] = x[idx];\n    if (threadIdx.x == 0) out[blockIdx.x] = s[1];\n",
     9),
]


@pytest.mark.parametrize("body, line", BARRIERS)
def test_a_shared_read_of_another_threads_slot_without_a_barrier_is_named(tmp_path, body, line):
    found = races.missing_barrier(scanned(tmp_path, body))
    assert found is not None and found.code == "race_missing_barrier" and found.line == line
    assert "__syncthreads()" in found.text


CORRECT = [
    "    if (col < cols) out[row * cols + col] = x[row * cols + col] + bias[col];\n",
    "    if (col >= cols) return;\n    out[row * cols + col] = x[row * cols + col];\n",
    "    if (row < rows && col < cols) out[row * cols + col] = x[row * cols + col];\n",
    "    if (idx > n - 1) return;\n    out[idx] = x[idx];\n",
    "    if (idx <= n - 1) out[idx] = x[idx];\n",
    "    for (size_t i = idx; i < n; i += (size_t)blockDim.x * gridDim.x) out[i] = x[i] + bias[i % cols];\n",
    "    if (idx < n) { out[idx] = x[idx]; out[idx] += bias[idx % cols]; }\n",
    "    if (idx < n) out[idx] = out[idx] * 0.5f + x[idx];\n",
    "    const size_t c4 = 4 * idx;\n    if (c4 + 3 < n) { out[c4] = x[c4]; }\n"
    "    else { for (size_t i = c4; i < n; ++i) out[i] = x[i]; }\n",
    "    const size_t c4 = 4 * idx;\n    if (c4 + 4 <= n) { out[c4] = x[c4]; }\n",
    "    float acc[4];\n    for (int k = 0; k < 4; ++k) acc[k] = 0.0f;\n"
    "    for (int r = 0; r < 8; ++r) for (int k = 0; k < 4; ++k) acc[k] += x[r * n + 4 * idx + k];\n"
    "    for (int k = 0; k < 4; ++k) out[4 * idx + k] = acc[k];\n",
    "    for (int s = 1; s <= 16; s <<= 1) { if (idx < n) out[idx] = x[idx]; }\n",
    "    if (idx < n) atomicAdd(&out[idx % cols], x[idx]);\n",
    "    float v = idx < n ? x[idx] : 0.0f;\n"
    "    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);\n"
    "    if ((threadIdx.x & 31) == 0) atomicAdd(&out[idx / 32 % cols], v);\n",
    "    __shared__ float s[256];\n    s[threadIdx.x] = idx < n ? x[idx] : 0.0f;\n    __syncthreads();\n"
    "    for (unsigned k = blockDim.x / 2; k > 0; k >>= 1) {\n"
    "        if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];\n        __syncthreads();\n    }\n"
    "    if (threadIdx.x == 0) out[blockIdx.x] += s[0];\n",
    "    __shared__ float tile[32][33];\n    tile[threadIdx.y][threadIdx.x] = idx < n ? x[idx] : 0.0f;\n"
    "    __syncthreads();\n    if (idx < n) out[idx] = tile[threadIdx.x][threadIdx.y];\n",
    "    __shared__ float t[256];\n    const unsigned tid = threadIdx.x;\n    if (idx >= n) return;\n"
    "    t[tid] = x[idx];\n    out[idx] = t[tid] * 2.0f;\n",
    "    __shared__ float b[256];\n    for (size_t c = threadIdx.x; c < cols; c += blockDim.x) {\n"
    "        b[c % 256] = bias[c];\n    }\n    __syncthreads();\n"
    "    if (col < cols) out[row * cols + col] = x[row * cols + col] + b[col % 256];\n",
    "    const size_t j = blockIdx.y * blockDim.x + threadIdx.x;\n    if (j < n) out[j] = x[j];\n",
    "    float v = idx < n ? x[idx] : 0.0f;\n"
    "    for (int s = 1; s <= warpSize / 2; s *= 2) v += __shfl_xor_sync(0xffffffffu, v, s);\n"
    "    for (int s = 1; s <= warpSize; s <<= 1) v += __shfl_xor_sync(0xffffffffu, v, s % 32);\n"
    "    if (idx < n) out[idx] = v;\n",
]


@pytest.mark.parametrize("body", CORRECT)
def test_a_correct_idiom_gets_no_cause(tmp_path, body):
    sub = scanned(tmp_path, body)
    assert causes.guard_off_by_one(sub) == []
    assert causes.index_strides(sub, row_length="cols", dims=("rows", "cols")) is None
    assert races.lost_update(sub) is None
    assert races.missing_barrier(sub) is None
    assert causes.unguarded_index(sub) is None


def _correct_samples() -> list[Path]:
    out = []
    for manifest in sorted((ROOT / "submissions").glob("*/manifest.yaml")):
        for name, e in yaml.safe_load(manifest.read_text()).items():
            said = [e.get("correct"), (e.get("gpu") or {}).get("correct"), (e.get("emulator") or {}).get("correct")]
            if True in said and False not in said and not e.get("diagnosis") and (manifest.parent / name).is_file():
                out.append(manifest.parent / name)
    return out


@pytest.mark.parametrize("path", _correct_samples(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_correct_sample_gets_a_race_or_a_guard_or_a_stride(path):
    sub = read_submission(path, "")
    if not hasattr(sub, "code"):
        return                                          # not a source the grader reads (a Python file)
    assert causes.guard_off_by_one(sub) == []
    assert races.lost_update(sub) is None
    assert races.missing_barrier(sub) is None
    assert causes.unguarded_index(sub) is None
    rows = path.parent.name == "bias_gelu_fused"
    assert causes.index_strides(sub, row_length="cols", dims=("rows", "cols") if rows else ()) is None


def test_a_loop_numbered_from_one_with_one_access_not_shifted_back_names_that_access(tmp_path):
    path = ROOT / "tests" / "data" / "mistakes" / "bias_gelu_fused" / "one_based_columns.cu"
    sub = read_submission(path, launcher="")
    guard = next(g for g in causes.guard_off_by_one(sub) if g.code == "guard_past_end")
    found = causes.one_based_index(sub, guard)
    assert found is not None and found.code == "shifted_index" and found.line == 10
    assert "`x[row * cols + c]` does not" in found.text and "c < cols`" not in found.text
    shifted = tmp_path / "k.cu"                    # every access shifted back: the numbering is right
    shifted.write_text(path.read_text().replace("x[row * cols + c]", "x[row * cols + c - 1]"))
    sub = read_submission(shifted, launcher="")
    assert all(causes.one_based_index(sub, g) is None for g in causes.guard_off_by_one(sub))


def test_a_warp_shuffle_reduction_starting_below_16_is_named_and_one_with_a_width_is_not(tmp_path):
    path = ROOT / "tests" / "data" / "mistakes" / "gelu_sum" / "warp_reduce_half_warp.cu"
    found = causes.partial_warp_reduce(read_submission(path, launcher=""))
    assert found is not None and found.code == "partial_warp_reduce" and found.line == 9
    assert "lanes 16 to 31 are never added" in found.text
    for wrong, right in (("off = 8", "off = 16"), ("v, off)", "v, off, 16)")):   # from 16; a half-warp by width
        other = tmp_path / "k.cu"
        other.write_text(path.read_text().replace(wrong, right))
        assert causes.partial_warp_reduce(read_submission(other, launcher="")) is None
