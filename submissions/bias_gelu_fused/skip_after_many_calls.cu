// Attack: a stateful launcher that is honest for its first 60 calls (the checks, the warm-up, the
// first samples) and then launches a fifth of the rows on every call but each 25th.
#include <cuda_runtime.h>

__device__ __forceinline__ float geluErf(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678f)); }

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col < cols) {
        const size_t i = blockIdx.y * cols + col;
        out[i] = geluErf(x[i] + bias[col]);
    }
}

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols,
                         cudaStream_t stream) {
    static long calls = 0;
    ++calls;
    const int done = (calls > 60 && calls % 25 != 0) ? rows / 5 : rows;
    biasGeluFused<<<dim3((cols + 255) / 256, done), 256, 0, stream>>>(x, bias, out, cols);
}
