import torch
from torch.utils.cpp_extension import load_inline

# A student pasted the whole Python file of a load_inline answer into the .cu file.
cuda_src = r"""
#include <cuda_runtime.h>
__global__ void gelu_sum_kernel(const float* __restrict__ x, float* __restrict__ out, int R, int B, int D) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= B * D) return;
    float acc = 0.0f;
    for (int r = 0; r < R; ++r) {
        float v = x[r * B * D + i];
        acc += 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
    out[i] = acc;
}
void launchGeluSum(const float* x, float* out, int R, int B, int D, cudaStream_t stream) {
    gelu_sum_kernel<<<(B * D + 255) / 256, 256, 0, stream>>>(x, out, R, B, D);
}
"""

ext = load_inline(name="gelu_sum_ext", cpp_sources="", cuda_sources=cuda_src, functions=[])
