// Idiom: a 2-D launch from launchRope with dim3: blockIdx.x and blockIdx.y together name the (batch, position, head) row (grid.y kept under 65535), threadIdx.x strides over j; the kernel keeps its own name (rope2d).
#include <cuda_runtime.h>

__global__ void rope2d(const float* __restrict__ in, const float* __restrict__ cosTab, const float* __restrict__ sinTab,
                       float* __restrict__ out, int rows, int seq, int heads, int half) {
    const int row = blockIdx.y * gridDim.x + blockIdx.x;   // ((b * seq) + s) * heads + h
    if (row >= rows) return;
    const int pos = (row / heads) % seq;
    for (int j = threadIdx.x; j < half; j += blockDim.x) {
        const size_t lo = static_cast<size_t>(row) * 2 * half + j;
        const float c = cosTab[pos * half + j], s = sinTab[pos * half + j];
        const float a = in[lo], b = in[lo + half];
        out[lo] = a * c - b * s;
        out[lo + half] = a * s + b * c;
    }
}

void launchRope(const float* in, const float* cosTab, const float* sinTab, float* out, int batch, int seq, int heads,
                int headDim, cudaStream_t stream) {
    const int half = headDim / 2;
    const int rows = batch * seq * heads;
    const dim3 block(32);
    const dim3 grid(1024, (rows + 1023) / 1024);
    rope2d<<<grid, block, 0, stream>>>(in, cosTab, sinTab, out, rows, seq, heads, half);
}
