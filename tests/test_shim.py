"""The CPU shim on small kernels of our own, built exactly as the emulator builds a submission."""

import ctypes
import subprocess

import torch

from grader.build import emulator_flags
from grader.source import rewrite_for_emulator

COMMON = r"""
extern "C" int run(const float* in, float* out, int n, int reverse) {
    grader_emu_set_reverse(reverse);
    return ::grader::guarded([&] { launchAll(in, out, n); });
}
"""


def build(tmp_path, body: str, fibers: bool) -> ctypes.CDLL:
    src = tmp_path / "k.cu"
    src.write_text(rewrite_for_emulator(body + COMMON))
    lib = tmp_path / "k.so"
    proc = subprocess.run(["g++", *emulator_flags(fibers=fibers), "-shared", "-o", str(lib), str(src)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    dll = ctypes.CDLL(str(lib))
    dll.run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    return dll


def run(dll, inp: torch.Tensor, n_out: int, reverse: bool = False) -> tuple[int, torch.Tensor]:
    out = torch.full((n_out,), float("nan"))
    code = dll.run(inp.data_ptr(), out.data_ptr(), inp.numel(), int(reverse))
    return code, out


SHARED_TILE = r"""
// Reverses each block's 64 values through shared memory: needs the barrier.
__global__ void reverseTile(const float* in, float* out, int n) {
    __shared__ float tile[64];
    int i = blockIdx.x * 64 + threadIdx.x;
    tile[threadIdx.x] = in[i];
    __syncthreads();
    out[i] = tile[63 - threadIdx.x];
}
void launchAll(const float* in, float* out, int n) { reverseTile<<<n / 64, 64>>>(in, out, n); }
"""


def test_shared_tile_with_barrier_in_both_orders(tmp_path):
    dll = build(tmp_path, SHARED_TILE, fibers=True)
    x = torch.arange(256, dtype=torch.float32)
    want = x.view(4, 64).flip(1).flatten()
    for reverse in (False, True):
        code, out = run(dll, x, 256, reverse)
        assert code == 0 and torch.equal(out, want)


def test_missing_barrier_shows_up_as_order_dependence(tmp_path):
    dll = build(tmp_path, SHARED_TILE.replace("__syncthreads();", ""), fibers=False)
    x = torch.arange(256, dtype=torch.float32)
    _, forward = run(dll, x, 256, False)
    _, backward = run(dll, x, 256, True)
    assert not torch.equal(forward.nan_to_num(-1), backward.nan_to_num(-1))


REDUCE = r"""
// Block sum: warp shuffles, then shared memory across warps, then one atomicAdd per block.
__global__ void blockSum(const float* in, float* out, int n) {
    __shared__ float warpSums[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? in[i] : 0.0f;
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    if (threadIdx.x % 32 == 0) warpSums[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        float w = threadIdx.x < blockDim.x / 32 ? warpSums[threadIdx.x] : 0.0f;
        for (int off = 16; off > 0; off >>= 1) w += __shfl_xor_sync(0xffffffffu, w, off);
        if (threadIdx.x == 0) atomicAdd(out, w);
    }
    unsigned any = __ballot_sync(0xffffffffu, i < n);
    if (threadIdx.x == 0 && blockIdx.x == 0) out[1] = static_cast<float>(__popc(any));
}
void launchAll(const float* in, float* out, int n) {
    out[0] = 0.0f;
    blockSum<<<(n + 255) / 256, 256>>>(in, out, n);
}
"""


def test_block_reduction_with_shuffles_ballot_and_atomics(tmp_path):
    dll = build(tmp_path, REDUCE, fibers=True)
    x = torch.arange(1000, dtype=torch.float32) % 7
    code, out = run(dll, x, 2)
    assert code == 0
    assert float(out[0]) == float(x.sum())
    assert float(out[1]) == 32.0


FLOAT4 = r"""
__global__ void scale4(const float4* in, float4* out, int n4) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) { float4 v = __ldg(&in[i]); out[i] = make_float4(2 * v.x, 2 * v.y, 2 * v.z, 2 * v.w); }
}
void launchAll(const float* in, float* out, int n) {
    scale4<<<(n / 4 + 127) / 128, 128>>>(reinterpret_cast<const float4*>(in), reinterpret_cast<float4*>(out), n / 4);
}
"""


def test_float4_loads(tmp_path):
    dll = build(tmp_path, FLOAT4, fibers=False)
    x = torch.randn(512)
    code, out = run(dll, x, 512)
    assert code == 0 and torch.equal(out, 2 * x)


def test_launch_configuration_errors_are_reported(tmp_path):
    dll = build(tmp_path, FLOAT4.replace("128>>>", "2048>>>"), fibers=False)
    code, _ = run(dll, torch.zeros(64), 64)
    assert code == 9          # cudaErrorInvalidConfiguration


def test_wild_pointer_is_caught_not_fatal(tmp_path):
    dll = build(tmp_path, r"""
__global__ void wild(const float* in, float* out, int n) { reinterpret_cast<float*>(0x40)[threadIdx.x] = 1.0f; }
void launchAll(const float* in, float* out, int n) { wild<<<1, 32>>>(in, out, n); }
""", fibers=False)
    code, _ = run(dll, torch.zeros(32), 32)
    assert code == -1
    dll.grader_emu_fault.restype = ctypes.POINTER(ctypes.c_int * 2)
    sig, is_write = dll.grader_emu_fault().contents
    assert sig == 11 and is_write == 1


def test_dynamic_shared_memory(tmp_path):
    dll = build(tmp_path, r"""
__global__ void viaDyn(const float* in, float* out, int n) {
    extern __shared__ float buf[];
    buf[threadIdx.x] = in[threadIdx.x] + 1.0f;
    __syncthreads();
    out[threadIdx.x] = buf[(threadIdx.x + 1) % blockDim.x];
}
void launchAll(const float* in, float* out, int n) { viaDyn<<<1, n, n * sizeof(float)>>>(in, out, n); }
""", fibers=True)
    x = torch.arange(64, dtype=torch.float32)
    code, out = run(dll, x, 64, reverse=True)
    assert code == 0 and torch.equal(out, torch.roll(x + 1, -1))
