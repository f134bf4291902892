// Idiom: __launch_bounds__ written before `void` with a parenthesised macro: __global__ __launch_bounds__(THREADS) void biasGeluFused, #define THREADS (128); default launch with 256 threads would exceed it, so a launcher.
#include <cuda_runtime.h>

#define THREADS (128)

__global__ __launch_bounds__(THREADS) void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                                                         float* __restrict__ out, size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col < cols) {
        const size_t i = blockIdx.y * cols + col;
        const float v = x[i] + bias[col];
        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
}

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols, cudaStream_t stream) {
    biasGeluFused<<<dim3((cols + THREADS - 1) / THREADS, rows), THREADS, 0, stream>>>(x, bias, out, static_cast<size_t>(cols));
}
