// Its own launcher: one block per (batch, position, head) row, its threads over the pairs, so
// the position is one 32-bit division per block and j is threadIdx.x. A plain __device__ helper
// does the rotation. No kernel is called ropeHalfSplit: with launchRope the exercise needs no
// kernel by name.
#include <cuda_runtime.h>

__device__ void rotate(float x0, float x1, float c, float s, float* lo, float* hi) {
    *lo = x0 * c - x1 * s;
    *hi = x0 * s + x1 * c;
}

__global__ void ropeRows(const float* __restrict__ in, const float* __restrict__ cosTab,
                         const float* __restrict__ sinTab, float* __restrict__ out, int halfDim, int heads,
                         int seq) {
    const unsigned row = blockIdx.x;
    const int pos = static_cast<int>((row / heads) % seq);
    const float* x = in + static_cast<size_t>(row) * 2 * halfDim;
    float* y = out + static_cast<size_t>(row) * 2 * halfDim;
    for (int j = threadIdx.x; j < halfDim; j += blockDim.x) {
        rotate(x[j], x[j + halfDim], cosTab[pos * halfDim + j], sinTab[pos * halfDim + j], &y[j], &y[j + halfDim]);
    }
}

void launchRope(const float* in, const float* cosTab, const float* sinTab, float* out, int batch, int seq,
                int heads, int headDim, cudaStream_t stream) {
    const int half = headDim / 2;
    const int threads = half < 1024 ? half : 1024;
    ropeRows<<<batch * seq * heads, threads, 0, stream>>>(in, cosTab, sinTab, out, half, heads, seq);
}
