// Idiom: a parenthesised block-size macro, #define BLOCK_SIZE (256), used in __launch_bounds__(BLOCK_SIZE) and in the launcher.
#include <cuda_runtime.h>

#define BLOCK_SIZE (256)

__global__ void __launch_bounds__(BLOCK_SIZE) biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                                                            float* __restrict__ out, size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(BLOCK_SIZE) + threadIdx.x;
    if (col < cols) {
        const size_t i = blockIdx.y * cols + col;
        const float v = x[i] + bias[col];
        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
}

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols, cudaStream_t stream) {
    dim3 grid((cols + BLOCK_SIZE - 1) / BLOCK_SIZE, rows);
    biasGeluFused<<<grid, BLOCK_SIZE, 0, stream>>>(x, bias, out, static_cast<size_t>(cols));
}
