// Bug: a loop whose exit condition never becomes true.
#include <cuda_runtime.h>

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    volatile int spin = 1;
    while (spin) {
    }
    if (col < cols) {
        const size_t i = blockIdx.y * cols + col;
        out[i] = x[i] + bias[col];
    }
}
