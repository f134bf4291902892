// A block per (row of x): half/2 threads, each rotating two pairs (j and j + half/2); the block
// first stages its position's cos and sin in shared memory.
#include <cuda_runtime.h>

__global__ void ropeTwoPairs(const float* __restrict__ in, const float* __restrict__ cosTab,
                             const float* __restrict__ sinTab, float* __restrict__ out,
                             int half, int heads, int seq) {
    extern __shared__ float tables[];
    float* sc = tables;
    float* ss = tables + half;
    const int row = blockIdx.x;
    const int pos = (row / heads) % seq;
    const int t = threadIdx.x;
    sc[t] = cosTab[pos * half + t];
    ss[t] = sinTab[pos * half + t];
    __syncthreads();
    const size_t base = (size_t)row * 2 * half;
    for (int j = t; j < half; j += blockDim.x) {
        const float x0 = in[base + j], x1 = in[base + j + half];
        out[base + j] = x0 * sc[j] - x1 * ss[j];
        out[base + j + half] = x0 * ss[j] + x1 * sc[j];
    }
}

void launchRope(const float* in, const float* cosTab, const float* sinTab, float* out, int batch,
                int seq, int heads, int headDim, cudaStream_t stream) {
    const int half = headDim / 2;
    const int threads = half / 2 > 0 ? half / 2 : 1;
    ropeTwoPairs<<<batch * seq * heads, threads, 2 * half * sizeof(float), stream>>>(
        in, cosTab, sinTab, out, half, heads, seq);
}
