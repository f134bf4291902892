// Bug: the row's start stepped by the row count, (size_t)row * rows, where rows are cols elements
// apart: the rows land in the wrong places, and the last ones run past the end of x and out.
#include <cuda_runtime.h>

__device__ __forceinline__ float geluErf(float x) {
    return 0.5f * x * (1.0f + erff(x * 0.70710678f));
}

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) {
    const size_t row = blockIdx.y;
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    const size_t rows = gridDim.y;                 // the launch has one block row a row
    if (col < cols) {
        const size_t i = (size_t)row * rows + col;
        out[i] = geluErf(x[i] + bias[col]);
    }
}
