// Attack: a stateful launcher that skips the work on a random three quarters of its calls at the
// timed shape (a small xorshift of its own), launching nothing then.
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
    static unsigned long long state = 0x9E3779B97F4A7C15ull;
    state ^= state << 13; state ^= state >> 7; state ^= state << 17;
    if (rows > 1024 && (state & 3) != 0) return;
    biasGeluFused<<<dim3((cols + 255) / 256, rows), 256, 0, stream>>>(x, bias, out, cols);
}
