// Idiom: one block per (batch, position): the position's cos/sin rows staged in dynamic shared memory (one extern __shared__ array split in two), __syncthreads, then a block-stride loop over heads x halfDim.
#include <cuda_runtime.h>

__global__ void ropeSharedTables(const float* __restrict__ in, const float* __restrict__ cosTab,
                                 const float* __restrict__ sinTab, float* __restrict__ out, int seq, int heads, int half) {
    extern __shared__ float smem[];
    float* sCos = smem;
    float* sSin = smem + half;
    const int bs = blockIdx.x;                 // b * seq + s
    const int pos = bs % seq;
    for (int j = threadIdx.x; j < half; j += blockDim.x) {
        sCos[j] = cosTab[pos * half + j];
        sSin[j] = sinTab[pos * half + j];
    }
    __syncthreads();
    const size_t base = static_cast<size_t>(bs) * heads * 2 * half;
    for (int t = threadIdx.x; t < heads * half; t += blockDim.x) {
        const int h = t / half, j = t % half;
        const size_t lo = base + static_cast<size_t>(h) * 2 * half + j;
        const float a = in[lo], b = in[lo + half];
        out[lo] = a * sCos[j] - b * sSin[j];
        out[lo + half] = a * sSin[j] + b * sCos[j];
    }
}

void launchRope(const float* in, const float* cosTab, const float* sinTab, float* out, int batch, int seq, int heads,
                int headDim, cudaStream_t stream) {
    const int half = headDim / 2;
    ropeSharedTables<<<batch * seq, 128, 2 * half * sizeof(float), stream>>>(in, cosTab, sinTab, out, seq, heads, half);
}
