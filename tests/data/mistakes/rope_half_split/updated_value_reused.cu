// In registers, one thread per pair; the rotation written as two updates.
#include <cuda_runtime.h>

__global__ void ropeHalfSplit(const float* __restrict__ in, const float* __restrict__ cosTab,
                              const float* __restrict__ sinTab, float* __restrict__ out, size_t pairs,
                              int halfDim, int heads, int seq) {
    const size_t p = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (p >= pairs) return;
    const size_t row = p / halfDim;
    const size_t j = p - row * halfDim;
    const size_t pos = (row / heads) % seq;
    const float c = cosTab[pos * halfDim + j];
    const float s = sinTab[pos * halfDim + j];
    float a = in[row * 2 * halfDim + j];
    float b = in[row * 2 * halfDim + j + halfDim];
    a = a * c - b * s;
    b = a * s + b * c;
    out[row * 2 * halfDim + j] = a;
    out[row * 2 * halfDim + j + halfDim] = b;
}
