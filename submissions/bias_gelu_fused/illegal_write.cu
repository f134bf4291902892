// Bug: writes through a wild pointer; the GPU reports an illegal address.
#include <cuda_runtime.h>

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col < cols) {
        const size_t i = blockIdx.y * cols + col;
        float* wild = reinterpret_cast<float*>(0x100);
        wild[i] = 0.5f * x[i] * (1.0f + erff((x[i] + bias[col]) * 0.70710678f));
        out[i] = wild[i];
    }
}
