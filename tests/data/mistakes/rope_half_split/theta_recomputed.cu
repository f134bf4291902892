// My own angles in double (the tables felt like cheating), grid-stride over the pairs.
#include <cuda_runtime.h>

__global__ void ropeHalfSplit(const float* __restrict__ in, const float* __restrict__ cosTab,
                              const float* __restrict__ sinTab, float* __restrict__ out, size_t pairs,
                              int halfDim, int heads, int seq) {
    for (size_t p = blockIdx.x * (size_t)blockDim.x + threadIdx.x; p < pairs;
         p += (size_t)blockDim.x * gridDim.x) {
        const size_t row = p / halfDim;
        const int j = (int)(p % halfDim);
        const int pos = (int)((row / heads) % seq);
        const double theta = pow(10000.0, -(double)j / (2.0 * halfDim));
        const float c = (float)cos(pos * theta);
        const float s = (float)sin(pos * theta);
        const size_t lo = row * 2 * halfDim + j;
        const float x0 = in[lo], x1 = in[lo + halfDim];
        out[lo] = x0 * c - x1 * s;
        out[lo + halfDim] = x0 * s + x1 * c;
    }
}
