// A device helper for the rotation, grid-stride over the pairs.
#include <cuda_runtime.h>

struct Rotated { float lo, hi; };

__device__ __forceinline__ Rotated rotate(float x0, float x1, float c, float s) {
    return {x0 * c - x1 * s, x0 * s + x1 * c};
}

__global__ void ropeHalfSplit(const float* __restrict__ in, const float* __restrict__ cosTab,
                              const float* __restrict__ sinTab, float* __restrict__ out, size_t pairs,
                              int halfDim, int heads, int seq) {
    for (size_t p = blockIdx.x * (size_t)blockDim.x + threadIdx.x; p < pairs;
         p += (size_t)gridDim.x * blockDim.x) {
        const size_t row = p / halfDim;
        const int j = (int)(p - row * halfDim);
        const int pos = (int)((row / heads) % seq);
        const float c = cosTab[pos * halfDim + j];
        const float s = sinTab[pos * halfDim + j];
        const size_t lo = row * 2 * halfDim + j;
        const Rotated r = rotate(in[lo], in[lo + halfDim], s, c);
        out[lo] = r.lo;
        out[lo + halfDim] = r.hi;
    }
}
