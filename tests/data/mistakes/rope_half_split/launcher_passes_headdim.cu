// The lesson's kernel, launched from my own launcher (the grid computed from the pairs).
#include <cuda_runtime.h>

__global__ void ropeHalfSplit(const float* __restrict__ in, const float* __restrict__ cosTab,
                              const float* __restrict__ sinTab, float* __restrict__ out, size_t pairs,
                              int halfDim, int heads, int seq) {
    const size_t p = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (p >= pairs) return;
    const size_t half = halfDim;
    const size_t row = p / half;
    const size_t j = p - row * half;
    const size_t pos = (row / heads) % seq;
    const size_t lo = row * 2 * half + j;
    const float c = cosTab[pos * half + j];
    const float s = sinTab[pos * half + j];
    const float x0 = in[lo];
    const float x1 = in[lo + half];
    out[lo] = x0 * c - x1 * s;
    out[lo + half] = x0 * s + x1 * c;
}

void launchRope(const float* in, const float* cosTab, const float* sinTab, float* out, int batch,
                int seq, int heads, int headDim, cudaStream_t stream) {
    const size_t pairs = (size_t)batch * seq * heads * (headDim / 2);
    const unsigned blocks = (unsigned)((pairs + 255) / 256);
    ropeHalfSplit<<<blocks, 256, 0, stream>>>(in, cosTab, sinTab, out, pairs, headDim, heads, seq);
}
