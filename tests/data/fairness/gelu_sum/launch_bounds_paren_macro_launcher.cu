// Idiom: a kernel of its own name with __launch_bounds__(THREADS), #define THREADS (256) parenthesised, launched from launchGeluSum.
#include <cuda_runtime.h>
#define THREADS (256)
__global__ void __launch_bounds__(THREADS) mySum(const float* __restrict__ x, float* __restrict__ out, int R, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float acc = 0.f;
    for (int r = 0; r < R; ++r) { const float v = x[(size_t)r * n + i]; acc += 0.5f * v * (1.0f + erff(v * 0.70710678f)); }
    out[i] = acc;
}
void launchGeluSum(const float* x, float* out, int R, int B, int D, cudaStream_t stream) {
    mySum<<<(B * D + THREADS - 1) / THREADS, THREADS, 0, stream>>>(x, out, R, B * D);
}
