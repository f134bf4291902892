// A block per head: the head's floats staged in shared memory, one thread per pair.
#include <cuda_runtime.h>

__global__ void ropeShared(const float* __restrict__ in, const float* __restrict__ cosTab,
                           const float* __restrict__ sinTab, float* __restrict__ out,
                           int half, int heads, int seq) {
    extern __shared__ float sx[];
    const int row = blockIdx.x;
    const int j = threadIdx.x;
    const size_t base = (size_t)row * 2 * half;
    sx[j] = in[base + j];
    __syncthreads();
    const int pos = (row / heads) % seq;
    const float c = cosTab[pos * half + j];
    const float s = sinTab[pos * half + j];
    const float x0 = sx[j];
    const float x1 = sx[j + half];
    out[base + j] = x0 * c - x1 * s;
    out[base + j + half] = x0 * s + x1 * c;
}

void launchRope(const float* in, const float* cosTab, const float* sinTab, float* out, int batch,
                int seq, int heads, int headDim, cudaStream_t stream) {
    const int half = headDim / 2;
    ropeShared<<<batch * seq * heads, half, headDim * sizeof(float), stream>>>(
        in, cosTab, sinTab, out, half, heads, seq);
}
