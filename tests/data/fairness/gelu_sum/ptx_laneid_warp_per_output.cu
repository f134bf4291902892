// Idiom: inline PTX for the lane id (asm volatile("mov.u32 %0, %%laneid;")) in a warp-per-output reduction with __shfl_down_sync. Inline PTX is documented (docs/design.md) as needing a GPU: the emulator must say so, never call it incorrect.
#include <cuda_runtime.h>

__device__ __forceinline__ unsigned laneId() {
    unsigned lane;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
    return lane;
}

__global__ void geluSumWarp(const float* __restrict__ x, float* __restrict__ out, int R, int n) {
    const int o = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const unsigned lane = laneId();
    if (o >= n) return;
    float acc = 0.f;
    for (int r = lane; r < R; r += 32) {
        const float v = x[static_cast<size_t>(r) * n + o];
        acc += 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, off);
    if (lane == 0) out[o] = acc;
}

void launchGeluSum(const float* x, float* out, int R, int B, int D, cudaStream_t stream) {
    const int n = B * D;
    geluSumWarp<<<(n + 7) / 8, 256, 0, stream>>>(x, out, R, n);
}
