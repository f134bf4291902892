// geluSum summing over B instead of R: thread (r, d) adds gelu(x[r][b][d]) over b and writes out[r][d].
#include <cuda_runtime.h>

__device__ float geluErf(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678f)); }

__global__ void geluSum(const float* __restrict__ x, float* __restrict__ out, int R, int B, int D) {
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * D) return;
    const int r = idx / D, d = idx % D;
    if (r >= R) return;
    float acc = 0.0f;
    for (int b = 0; b < B; ++b) acc += geluErf(x[(static_cast<size_t>(r) * B + b) * D + d]);
    out[r * D + d] = acc;
}
