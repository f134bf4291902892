// The lesson's one thread per pair; positions counted from 1.
#include <cuda_runtime.h>

__global__ void ropeHalfSplit(const float* __restrict__ in, const float* __restrict__ cosTab,
                              const float* __restrict__ sinTab, float* __restrict__ out, size_t pairs,
                              int halfDim, int heads, int seq) {
    const size_t p = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (p >= pairs) return;
    const size_t row = p / halfDim;
    const size_t j = p % halfDim;
    const size_t pos = (row / heads) % seq + 1;
    const size_t t = (pos - 1) * halfDim + j;
    const size_t lo = row * 2 * halfDim + j;
    const float c = cosTab[pos * halfDim + j];
    const float s = sinTab[t];
    const float x0 = in[lo];
    const float x1 = in[lo + halfDim];
    out[lo] = x0 * c - x1 * s;
    out[lo + halfDim] = x0 * s + x1 * c;
}
