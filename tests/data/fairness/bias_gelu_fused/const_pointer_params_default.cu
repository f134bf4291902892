// Idiom: const pointers to const (float const* const __restrict__), a const size_t by value, `unsigned int` thread index; the default launch.
#include <cuda_runtime.h>
#include <math.h>

__global__ void biasGeluFused(float const* const __restrict__ x, float const* const __restrict__ bias,
                              float* const __restrict__ out, const size_t cols) {
    const unsigned int tid = threadIdx.x;
    const size_t col = static_cast<size_t>(blockIdx.x) * blockDim.x + tid;
    if (col < cols) {
        const size_t i = static_cast<size_t>(blockIdx.y) * cols + col;
        const float v = x[i] + bias[col];
        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
}
