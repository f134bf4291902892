// Bug: the row's start computed with the block's width instead of the row length, although the
// column is guarded: rows land blockDim.x apart, and the last ones run past the end of x and out.
#include <cuda_runtime.h>

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) {
    const size_t row = blockIdx.y;
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col < cols) {
        const size_t i = row * blockDim.x + col;
        const float v = x[i] + bias[col];
        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
}
