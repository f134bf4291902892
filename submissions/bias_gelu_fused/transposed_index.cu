// Bug: the flat index column-major (col * rows + row), as a Fortran or MATLAB habit writes it:
// every element is written once, each from the wrong place.
#include <cuda_runtime.h>

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    const size_t row = blockIdx.y;
    const size_t rows = gridDim.y;
    if (col < cols) {
        const size_t i = col * rows + row;
        const float v = x[i] + bias[col];
        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
}
