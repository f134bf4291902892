// blockIdx.x is the (batch, position, head) row, threads over the pairs of that head.
#include <cuda_runtime.h>

__global__ void ropeRows(const float* __restrict__ in, const float* __restrict__ cosTab,
                         const float* __restrict__ sinTab, float* __restrict__ out,
                         int seq, int half) {
    const int j = blockIdx.y * blockDim.x + threadIdx.x;
    const int row = blockIdx.x;
    if (j >= half) return;
    const int pos = row % seq;
    const float* x = in + (size_t)row * 2 * half;
    float* y = out + (size_t)row * 2 * half;
    const float c = cosTab[pos * half + j], s = sinTab[pos * half + j];
    const float x0 = x[j], x1 = x[j + half];
    y[j] = x0 * c - x1 * s;
    y[j + half] = x0 * s + x1 * c;
}

void launchRope(const float* in, const float* cosTab, const float* sinTab, float* out, int batch,
                int seq, int heads, int headDim, cudaStream_t stream) {
    const int half = headDim / 2;
    dim3 grid(batch * seq * heads, (half + 127) / 128);
    ropeRows<<<grid, 128, 0, stream>>>(in, cosTab, sinTab, out, seq, half);
}
