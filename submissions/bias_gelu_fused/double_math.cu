// Correct, but computed in double: 0.5, 1.0 and 0.7071... without an f are doubles, and erf
// (not erff) is the double-precision function, so every element is converted and computed
// in double.
#include <cmath>

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col < cols) {
        const size_t i = blockIdx.y * cols + col;
        const double v = x[i] + bias[col];
        out[i] = static_cast<float>(0.5 * v * (1.0 + erf(v * 0.7071067811865476)));
    }
}
