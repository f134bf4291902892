// A 3D grid: x over the pairs of a head, y over the heads, z over batch * seq.
#include <cuda_runtime.h>

__global__ void ropeGrid3(const float* __restrict__ in, const float* __restrict__ cosTab,
                          const float* __restrict__ sinTab, float* __restrict__ out,
                          int seq, int heads, int half) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= half) return;
    const int head = blockIdx.y;
    const int bs = blockIdx.z;
    const int pos = head;
    const size_t base = ((size_t)bs * heads + head) * 2 * half;
    const float c = cosTab[pos * half + j];
    const float s = sinTab[pos * half + j];
    const float x0 = in[base + j];
    const float x1 = in[base + j + half];
    out[base + j] = x0 * c - x1 * s;
    out[base + j + half] = x0 * s + x1 * c;
}

void launchRope(const float* in, const float* cosTab, const float* sinTab, float* out, int batch,
                int seq, int heads, int headDim, cudaStream_t stream) {
    const int half = headDim / 2;
    dim3 block(32);
    dim3 grid((half + 31) / 32, heads, batch * seq);
    ropeGrid3<<<grid, block, 0, stream>>>(in, cosTab, sinTab, out, seq, heads, half);
}
