// Idiom: Kahan (compensated) summation over r in a thread-per-output kernel, the default launch (no launcher), `auto` and `const auto`.
#include <cuda_runtime.h>

__global__ void geluSum(const float* __restrict__ x, float* __restrict__ out, int R, int B, int D) {
    const auto n = B * D;
    const auto i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
    if (i >= n) return;
    float sum = 0.0f, comp = 0.0f;
    for (auto r = 0; r < R; ++r) {
        const float v = x[static_cast<size_t>(r) * n + i];
        const float y = 0.5f * v * (1.0f + erff(v * 0.70710678f)) - comp;
        const float t = sum + y;
        comp = (t - sum) - y;
        sum = t;
    }
    out[i] = sum;
}
