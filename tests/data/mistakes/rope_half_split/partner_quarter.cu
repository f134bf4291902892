// The lesson's launch; the partner's offset computed in the kernel from the size it is given.
#include <cuda_runtime.h>

__global__ void ropeHalfSplit(const float* __restrict__ in, const float* __restrict__ cosTab,
                              const float* __restrict__ sinTab, float* __restrict__ out, size_t pairs,
                              int halfDim, int heads, int seq) {
    const size_t p = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (p >= pairs) return;
    const int offset = halfDim / 2;
    const size_t row = p / halfDim;
    const int j = (int)(p % halfDim);
    const int pos = (int)((row / heads) % seq);
    const size_t head = row * 2 * halfDim;
    const int lo = j < offset ? j : j + offset;
    const float c = cosTab[(size_t)pos * halfDim + j];
    const float s = sinTab[(size_t)pos * halfDim + j];
    const float x0 = in[head + lo];
    const float x1 = in[head + lo + offset];
    out[head + lo] = x0 * c - x1 * s;
    out[head + lo + offset] = x0 * s + x1 * c;
}
