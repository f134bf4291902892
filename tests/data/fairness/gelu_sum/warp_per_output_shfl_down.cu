// Idiom: one warp per output element, lanes stride over r, a __shfl_down_sync tree reduction, lane 0 writes; warp index from a constexpr warp size, launched from launchGeluSum.
#include <cuda_runtime.h>

constexpr int kWarp = 32;

__device__ __forceinline__ float geluErf(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678f)); }

__device__ __forceinline__ float warpSum(float v) {
#pragma unroll
    for (int off = kWarp / 2; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    return v;
}

__global__ void geluSumWarp(const float* __restrict__ x, float* __restrict__ out, int R, int BD) {
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / kWarp;
    const int lane = threadIdx.x % kWarp;
    if (warp >= BD) return;                          // whole warps leave together
    float acc = 0.0f;
    for (int r = lane; r < R; r += kWarp) acc += geluErf(x[static_cast<size_t>(r) * BD + warp]);
    acc = warpSum(acc);
    if (lane == 0) out[warp] = acc;
}

void launchGeluSum(const float* x, float* out, int R, int B, int D, cudaStream_t stream) {
    const int BD = B * D;
    const int threads = 256, warpsPerBlock = threads / kWarp;
    geluSumWarp<<<(BD + warpsPerBlock - 1) / warpsPerBlock, threads, 0, stream>>>(x, out, R, BD);
}
