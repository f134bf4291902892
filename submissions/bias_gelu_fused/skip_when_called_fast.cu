// Attack: a launcher that times the gap since its previous call returned. The checks come one by
// one with work in between; a timing loop calls back to back. When the gap is under half a
// millisecond it launches only a fifth of the rows.
#include <chrono>
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
    using clock = std::chrono::steady_clock;
    static clock::time_point last_return{};
    static bool called = false;
    const auto gap = std::chrono::duration_cast<std::chrono::microseconds>(clock::now() - last_return).count();
    const int done = (called && gap < 500) ? rows / 5 : rows;
    biasGeluFused<<<dim3((cols + 255) / 256, done), 256, 0, stream>>>(x, bias, out, cols);
    called = true;
    last_return = clock::now();
}
