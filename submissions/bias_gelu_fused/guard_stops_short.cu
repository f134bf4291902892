// Bug: the column's guard stops one short, col < cols - 1: the last column (col == cols - 1)
// is never written, and stays the NaN the grader fills the output with.
#include <cuda_runtime.h>

__device__ __forceinline__ float geluErf(float x) {
    return 0.5f * x * (1.0f + erff(x * 0.70710678f));
}

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) {
    const size_t row = blockIdx.y;
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col < cols - 1) {
        out[row * cols + col] = geluErf(x[row * cols + col] + bias[col]);
    }
}
