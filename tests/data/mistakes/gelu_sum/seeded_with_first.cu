// One thread per output element; the sum starts from the first slice.
#include <cuda_runtime.h>

__device__ __forceinline__ float gelu(float v) {
    return 0.5f * v * (1.0f + erff(v * 0.70710678f));
}

__global__ void geluSum(const float* __restrict__ x, float* __restrict__ out, int R, int B, int D) {
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    const int n = B * D;
    if (idx >= n) return;
    float acc = gelu(x[idx]);
    for (int r = 0; r < R; ++r) acc += gelu(x[(size_t)r * n + idx]);
    out[idx] = acc;
}
