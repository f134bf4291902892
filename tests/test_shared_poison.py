"""Shared memory no thread of the block wrote (issue 71): on a GPU it holds whatever was there, so a
kernel that reads it is wrong there; the emulator fills every block's static and dynamic shared
memory with SHARED_POISON_BITS (a NaN) before the block runs, so the same kernel is wrong on the
emulator too (it read the zeros of a static, or the last block's values, and could pass), and the
verdict names it by the NaN's payload (reads_unwritten_shared), at the line that stages the array.
"""

from __future__ import annotations

import numpy as np
import torch
from test_shim import build, run

from grader.core.contract import POISON_BITS, SHARED_POISON_BITS
from grader.core.source import read_submission
from grader.verdict import diagnosis, workspace

# Block 0 stages all 64 slots of the tile, every later block only the even ones; each block writes
# its 64 outputs from the whole tile. Before the fill, block 1 read block 0's odd slots (its
# leftovers) and every output came out as if staged.
HALF_STAGED = r"""
__global__ void copyTile(const float* in, float* out, int n) {
    __shared__ __align__(16) float tile[64];
    int i = blockIdx.x * 64 + threadIdx.x;
    if (blockIdx.x == 0 || threadIdx.x % 2 == 0) tile[threadIdx.x] = in[i];
    __syncthreads();
    out[i] = tile[threadIdx.x];
}
void launchAll(const float* in, float* out, int n) { copyTile<<<n / 64, 64>>>(in, out, n); }
"""

# The same with the tile in dynamic shared memory (extern __shared__), where a launch's buffer was
# zero-filled and each block read the last block's values.
HALF_STAGED_DYNAMIC = r"""
__global__ void copyTile(const float* in, float* out, int n) {
    extern __shared__ float tile[];
    int i = blockIdx.x * 64 + threadIdx.x;
    if (blockIdx.x == 0 || threadIdx.x % 2 == 0) tile[threadIdx.x] = in[i];
    __syncthreads();
    out[i] = tile[threadIdx.x];
}
void launchAll(const float* in, float* out, int n) { copyTile<<<n / 64, 64, 64 * sizeof(float)>>>(in, out, n); }
"""


def _bits(out: torch.Tensor) -> np.ndarray:
    return out.numpy().view(np.uint32)


def test_a_block_reads_the_fill_where_it_staged_nothing_not_the_last_blocks_values(tmp_path):
    for k, body in enumerate((HALF_STAGED, HALF_STAGED_DYNAMIC)):
        (tmp_path / str(k)).mkdir()
        dll = build(tmp_path / str(k), body, fibers=True)
        x = torch.arange(256, dtype=torch.float32)
        for reverse in (False, True):
            code, out = run(dll, x, 256, reverse)
            assert code == 0
            bits = _bits(out).reshape(4, 64)
            assert torch.equal(out[:64], x[:64])                       # block 0 staged every slot
            assert (bits[1:, 1::2] == SHARED_POISON_BITS).all()         # the odd slots of blocks 1..3: the fill
            assert torch.equal(out.view(4, 64)[1:, ::2], x.view(4, 64)[1:, ::2])


def test_a_correct_tile_kernel_reads_no_fill(tmp_path):
    dll = build(tmp_path, HALF_STAGED.replace("blockIdx.x == 0 || threadIdx.x % 2 == 0", "true"), fibers=True)
    x = torch.arange(256, dtype=torch.float32)
    code, out = run(dll, x, 256)
    assert code == 0 and torch.equal(out, x)


def test_the_fill_is_counted_as_what_it_is_in_the_diagnosis():
    """Every element counted: the fill's NaN (either sign) apart from other NaN, the poison of an
    unwritten element in neither."""
    got = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], dtype=np.float32)
    raw = got.view(np.uint32)
    raw[1] = SHARED_POISON_BITS
    raw[2] = SHARED_POISON_BITS | 0x80000000          # negated on the way to the output
    raw[3] = 0x7FC00000                                # another NaN
    raw[4] = POISON_BITS                               # never written
    written = raw != POISON_BITS
    assert diagnosis._from_unwritten_shared(got, written) == 2
    said = diagnosis._shared_said(2, 3, int(written.sum()))
    assert said.startswith("2 of the 5 elements written are the NaN") and "(1 more NaN otherwise)" in said


def test_the_line_named_is_the_write_that_stages_the_array_through_an_alias_too(tmp_path):
    path = tmp_path / "k.cu"
    path.write_text(HALF_STAGED)
    named = workspace.unwritten_shared(read_submission(path, "launchAll"))
    assert named is not None and named.line == 5 and "shared array tile" in named.text
    path.write_text(HALF_STAGED_DYNAMIC.replace("    extern __shared__ float tile[];\n",
                                                "    extern __shared__ float buf[];\n    float* tile = buf + 0;\n"))
    named = workspace.unwritten_shared(read_submission(path, "launchAll"))
    assert named is not None and named.line == 6 and "shared array buf" in named.text
    path.write_text("__global__ void k(float* out) { out[0] = 1.0f; }\n")
    assert workspace.unwritten_shared(read_submission(path, "k")) is None
