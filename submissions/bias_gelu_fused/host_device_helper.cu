// A __host__ __device__ helper that is not inline, and a constant computed by it.
#include <cmath>

__host__ __device__ float geluErf(float v) {
    const float kInvSqrt2 = 0.70710678f;
    return 0.5f * v * (1.0f + erff(v * kInvSqrt2));
}

__global__ void biasGeluFused(const float* x, const float* bias, float* out, size_t cols) {
    size_t col = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    size_t row = blockIdx.y;
    if (col >= cols) return;
    out[row * cols + col] = geluErf(x[row * cols + col] + bias[col]);
}
