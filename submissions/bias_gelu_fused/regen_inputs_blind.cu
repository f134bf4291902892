// An attack: as regen_inputs_recognise.cu, but without looking at x first. At the timed shape it
// regenerates every row of x from the generator keyed for seed 1000 (the first timed set, as it
// once was) and reads nothing but the bias. On a GPU the timed sets are drawn from a seed chosen
// for each run, so what it regenerates is not what it was given: incorrect.
#include <cuda_runtime.h>
#include <cstdint>

__device__ __forceinline__ float geluErf(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678f)); }

__device__ uint64_t philoxWord(uint64_t k0, uint64_t k1, uint64_t j) {
    uint64_t c0 = j / 4 + 1, c1 = 0, c2 = 0, c3 = 0;
    for (int r = 0; r < 10; ++r) {
        if (r) { k0 += 0x9E3779B97F4A7C15ULL; k1 += 0xBB67AE8584CAA73BULL; }
        const uint64_t lo0 = 0xD2E7470EE14C6C93ULL * c0, hi0 = __umul64hi(0xD2E7470EE14C6C93ULL, c0);
        const uint64_t lo1 = 0xCA5A826395121157ULL * c2, hi1 = __umul64hi(0xCA5A826395121157ULL, c2);
        c0 = hi1 ^ c1 ^ k0; c1 = lo1; c2 = hi0 ^ c3 ^ k1; c3 = lo0;
    }
    return j % 4 == 0 ? c0 : j % 4 == 1 ? c1 : j % 4 == 2 ? c2 : c3;
}

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col >= cols) return;
    const size_t i = blockIdx.y * cols + col;
    float v = x[i];
    if (cols == 1024 && gridDim.y == 16384) {
        const uint64_t w = philoxWord(0x0b650855b3b0b977ULL, 0x3b46a32d3b5a6092ULL, i / 2);
        const uint32_t h = (i & 1) ? static_cast<uint32_t>(w >> 32) : static_cast<uint32_t>(w);
        const float u = static_cast<float>(h >> 8) * (1.0f / 16777216.0f);
        v = (h & 0xFF) < 26 ? __fsub_rn(__fmul_rn(u, 24.0f), 12.0f) : __fsub_rn(__fmul_rn(u, 8.0f), 4.0f);
    }
    out[i] = geluErf(v + bias[col]);
}
