// Bug: the launcher takes size_t rows and cols where the exercise's launcher takes int. It
// compiles (C++ takes it for another function of the same name) and would fail only when loaded.
#include <cuda_runtime.h>

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col < cols) {
        const size_t i = blockIdx.y * cols + col;
        const float v = x[i] + bias[col];
        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
}

void launchBiasGeluFused(const float* x, const float* bias, float* out, size_t rows, size_t cols,
                         cudaStream_t stream) {
    const dim3 block(256);
    const dim3 grid(static_cast<unsigned>((cols + 255) / 256), static_cast<unsigned>(rows));
    biasGeluFused<<<grid, block, 0, stream>>>(x, bias, out, cols);
}
