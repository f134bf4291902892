// A warp per output element: lanes stride over r, then a shuffle reduction; lane 0 writes.
#include <cuda_runtime.h>

__device__ __forceinline__ float gelu(float v) {
    return 0.5f * v * (1.0f + erff(v * 0.70710678f));
}

__device__ __forceinline__ float warpSum(float v) {
    for (int off = 8; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    return v;
}

__global__ void geluSumWarp(const float* __restrict__ x, float* __restrict__ out, int R, int n) {
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x & 31;
    if (warp >= n) return;
    float acc = 0.0f;
    for (int r = lane; r < R; r += 32) acc += gelu(x[(size_t)r * n + warp]);
    acc = warpSum(acc);
    if (lane == 0) out[warp] = acc;
}

void launchGeluSum(const float* x, float* out, int R, int B, int D, cudaStream_t stream) {
    const int n = B * D;
    const int warpsPerBlock = 8;
    geluSumWarp<<<(n + warpsPerBlock - 1) / warpsPerBlock, warpsPerBlock * 32, 0, stream>>>(x, out, R, n);
}
