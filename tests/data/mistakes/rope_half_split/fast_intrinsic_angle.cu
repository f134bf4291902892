// The angles computed on the fly instead of read from the tables (saves two loads), fast intrinsics.
#include <cuda_runtime.h>

__global__ void ropeHalfSplit(const float* __restrict__ in, const float* __restrict__ cosTab,
                              const float* __restrict__ sinTab, float* __restrict__ out, size_t pairs,
                              int halfDim, int heads, int seq) {
    size_t p = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (p >= pairs) return;
    size_t row = p / halfDim;
    int j = (int)(p % halfDim);
    int pos = (int)((row / heads) % seq);
    float theta = __powf(10000.0f, -2.0f * j / (2.0f * halfDim));
    float s = __sinf(pos * theta);
    float c = __cosf(pos * theta);
    size_t lo = row * 2 * halfDim + j;
    float x0 = in[lo], x1 = in[lo + halfDim];
    out[lo] = x0 * c - x1 * s;
    out[lo + halfDim] = x0 * s + x1 * c;
}
