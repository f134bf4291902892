// One thread per output float: the lower half subtracts, the upper half adds.
#include <cuda_runtime.h>

__global__ void ropeElem(const float* __restrict__ in, const float* __restrict__ cosTab,
                         const float* __restrict__ sinTab, float* __restrict__ out, size_t n,
                         int headDim, int heads, int seq) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    int half = headDim / 2;
    int d = (int)(i % headDim);
    size_t row = i / headDim;
    int pos = (int)((row / heads) % seq);
    size_t base = row * headDim;
    float c = cosTab[pos * half + d];
    float s = sinTab[pos * half + d];
    if (d < half) {
        out[i] = in[i] * c - in[base + d + half] * s;
    } else {
        out[i] = in[base + d - half] * s + in[i] * c;
    }
}

void launchRope(const float* in, const float* cosTab, const float* sinTab, float* out, int batch,
                int seq, int heads, int headDim, cudaStream_t stream) {
    size_t n = (size_t)batch * seq * heads * headDim;
    ropeElem<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(in, cosTab, sinTab, out, n, headDim,
                                                              heads, seq);
}
