// 2D launch: blockIdx.x is the (batch, position, head) row, threads over the pairs.
#include <cuda_runtime.h>

__global__ void ropeKernel(const float* __restrict__ in, const float* __restrict__ cosTab,
                           const float* __restrict__ sinTab, float* __restrict__ out,
                           int seq, int heads, int headDim) {
    const int half = headDim / 2;
    const int row = blockIdx.x;
    const int pos = (row / heads) % seq;
    const int j = blockIdx.y * blockDim.x + threadIdx.x;
    if (j >= half) return;
    const size_t base = (size_t)row * headDim;
    const float c = cosTab[pos * headDim + j];
    const float s = sinTab[pos * headDim + j];
    const float a = in[base + j];
    const float b = in[base + j + half];
    out[base + j] = a * c - b * s;
    out[base + j + half] = a * s + b * c;
}

void launchRope(const float* in, const float* cosTab, const float* sinTab, float* out, int batch,
                int seq, int heads, int headDim, cudaStream_t stream) {
    const int half = headDim / 2;
    const int threads = 64;
    dim3 grid(batch * seq * heads, (half + threads - 1) / threads);
    ropeKernel<<<grid, threads, 0, stream>>>(in, cosTab, sinTab, out, seq, heads, headDim);
}
