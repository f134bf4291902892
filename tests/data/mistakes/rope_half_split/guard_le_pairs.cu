// One thread per pair, 32-bit indices.
#include <cuda_runtime.h>

__global__ void ropeHalfSplit(const float* __restrict__ in, const float* __restrict__ cosTab,
                              const float* __restrict__ sinTab, float* __restrict__ out, size_t pairs,
                              int halfDim, int heads, int seq) {
    int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p <= (int)pairs) {
        int row = p / halfDim;
        int j = p % halfDim;
        int pos = (row / heads) % seq;
        int lo = row * 2 * halfDim + j;
        float c = cosTab[pos * halfDim + j];
        float s = sinTab[pos * halfDim + j];
        float x0 = in[lo];
        float x1 = in[lo + halfDim];
        out[lo] = x0 * c - x1 * s;
        out[lo + halfDim] = x0 * s + x1 * c;
    }
}
