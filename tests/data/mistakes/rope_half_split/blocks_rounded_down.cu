// Own launcher, one thread per pair, blocks of 256.
#include <cuda_runtime.h>

__global__ void ropePairs(const float* __restrict__ in, const float* __restrict__ cosTab,
                          const float* __restrict__ sinTab, float* __restrict__ out, int pairs,
                          int half, int heads, int seq) {
    int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= pairs) return;
    int row = p / half, j = p % half;
    int pos = (row / heads) % seq;
    int lo = row * 2 * half + j;
    float c = cosTab[pos * half + j], s = sinTab[pos * half + j];
    float x0 = in[lo], x1 = in[lo + half];
    out[lo] = x0 * c - x1 * s;
    out[lo + half] = x0 * s + x1 * c;
}

void launchRope(const float* in, const float* cosTab, const float* sinTab, float* out, int batch,
                int seq, int heads, int headDim, cudaStream_t stream) {
    int half = headDim / 2;
    int pairs = batch * seq * heads * half;
    int blocks = pairs / 256 + (pairs < 256 ? 1 : 0);
    ropePairs<<<blocks, 256, 0, stream>>>(in, cosTab, sinTab, out, pairs, half, heads, seq);
}
