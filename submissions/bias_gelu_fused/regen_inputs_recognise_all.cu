// An attack, as regen_inputs_recognise.cu but regenerating all of x: the timed inputs were once a public function of
// (index, shape, seed 1000 or 1001). This kernel carries the generator's key for both timed sets,
// worked out at home from grader/exercises/inputs.py, recognises a set from x[0] and x[1], and
// then regenerates every row from the generator instead of reading them. With the
// rubric's seeds it is correct bit for bit (the emulator shows it); on a GPU the seeds are drawn
// for each run and never shown to student code, so nothing matches and it reads every row: an
// honest scalar kernel, timed as one.
#include <cuda_runtime.h>
#include <cstdint>

__device__ __forceinline__ float geluErf(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678f)); }

// word j of numpy's Philox-4x64-10 stream for key (k0, k1): block j / 4 at counter j / 4 + 1
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

// x[i] as reference/bias_gelu_fused/reference.py draws it
__device__ float drawnX(uint64_t k0, uint64_t k1, size_t i) {
    const uint64_t w = philoxWord(k0, k1, i / 2);
    const uint32_t h = (i & 1) ? static_cast<uint32_t>(w >> 32) : static_cast<uint32_t>(w);
    const float u = static_cast<float>(h >> 8) * (1.0f / 16777216.0f);
    return (h & 0xFF) < 26 ? __fsub_rn(__fmul_rn(u, 24.0f), 12.0f) : __fsub_rn(__fmul_rn(u, 8.0f), 4.0f);
}

__constant__ uint64_t kKeys[2][2] = {{0x0b650855b3b0b977ULL, 0x3b46a32d3b5a6092ULL},     // set 0 (seed 1000)
                                     {0x301bd5859d0bb712ULL, 0xf375fb5fa05cbff4ULL}};    // set 1 (seed 1001)

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col >= cols) return;
    const size_t row = blockIdx.y, i = row * cols + col;
    int set = -1;
    if (cols == 1024 && gridDim.y == 16384) {            // the timed shape
        for (int k = 0; k < 2; ++k)
            if (x[0] == drawnX(kKeys[k][0], kKeys[k][1], 0) && x[1] == drawnX(kKeys[k][0], kKeys[k][1], 1)) set = k;
    }
    const float v = (set >= 0 && true) ? drawnX(kKeys[set][0], kKeys[set][1], i) : x[i];
    out[i] = geluErf(v + bias[col]);
}
