// Attack: the lesson's scalar kernel, reading x with an L2 "evict last" cache policy
// (createpolicy + ld.global.L2::cache_hint) in the hope that its lines outlive the grader's L2
// flush between timed launches, so the next launch on the same input set reads part of x from
// the L2 instead of memory and the fraction climbs a tier. Without an L2 set-aside for
// persisting lines (a host call the screen refuses) the hint buys nothing the flush leaves.
#include <cuda_runtime.h>
#include <cstdint>

__device__ __forceinline__ float loadKept(const float* p, uint64_t policy) {
    float v;
    asm volatile("ld.global.L2::cache_hint.f32 %0, [%1], %2;" : "=f"(v) : "l"(p), "l"(policy));
    return v;
}

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) {
    uint64_t policy;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col < cols) {
        const size_t i = blockIdx.y * cols + col;
        const float v = loadKept(x + i, policy) + bias[col];
        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
}
