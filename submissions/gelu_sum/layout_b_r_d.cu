// x read as [B][R][D]: the slice index in the middle.
#include <cuda_runtime.h>

__device__ float geluErf(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678f)); }

__global__ void geluSum(const float* __restrict__ x, float* __restrict__ out, int R, int B, int D) {
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    const int n = B * D;
    if (idx >= n) return;
    float acc = 0.0f;
    const int b = idx / D, d = idx % D;
    for (int r = 0; r < R; ++r) acc += geluErf(x[(static_cast<size_t>(b) * R + r) * D + d]);
    out[idx] = acc;
}
