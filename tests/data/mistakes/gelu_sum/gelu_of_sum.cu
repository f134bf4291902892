// Sum first, one GELU per output (R times fewer erff calls).
#include <cuda_runtime.h>

__global__ void geluSum(const float* __restrict__ x, float* __restrict__ out, int R, int B, int D) {
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    const int n = B * D;
    if (idx >= n) return;
    float s = 0.0f;
    for (int r = 0; r < R; ++r) s += x[(size_t)r * n + idx];
    out[idx] = 0.5f * s * (1.0f + erff(s * 0.70710678f));
}
