// Idiom: a kernel templated on halfDim (compile-time, #pragma unroll over j) dispatched from a switch in the launcher, a runtime-halfDim kernel as the fallback.
#include <cuda_runtime.h>

template <int HALF>
__global__ void ropeFixed(const float* __restrict__ in, const float* __restrict__ cosTab, const float* __restrict__ sinTab,
                          float* __restrict__ out, int rows, int heads, int seq) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const int pos = (row / heads) % seq;
    const float* x = in + static_cast<size_t>(row) * 2 * HALF;
    float* y = out + static_cast<size_t>(row) * 2 * HALF;
#pragma unroll
    for (int j = 0; j < HALF; ++j) {
        const float c = cosTab[pos * HALF + j], s = sinTab[pos * HALF + j];
        y[j] = x[j] * c - x[j + HALF] * s;
        y[j + HALF] = x[j] * s + x[j + HALF] * c;
    }
}

__global__ void ropeAny(const float* __restrict__ in, const float* __restrict__ cosTab, const float* __restrict__ sinTab,
                        float* __restrict__ out, int rows, int heads, int seq, int half) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const int pos = (row / heads) % seq;
    for (int j = 0; j < half; ++j) {
        const size_t lo = static_cast<size_t>(row) * 2 * half + j;
        const float c = cosTab[pos * half + j], s = sinTab[pos * half + j];
        out[lo] = in[lo] * c - in[lo + half] * s;
        out[lo + half] = in[lo] * s + in[lo + half] * c;
    }
}

void launchRope(const float* in, const float* cosTab, const float* sinTab, float* out, int batch, int seq, int heads,
                int headDim, cudaStream_t stream) {
    const int rows = batch * seq * heads;
    const int threads = 128, blocks = (rows + threads - 1) / threads;
    switch (headDim) {
        case 64:  ropeFixed<32><<<blocks, threads, 0, stream>>>(in, cosTab, sinTab, out, rows, heads, seq); break;
        case 128: ropeFixed<64><<<blocks, threads, 0, stream>>>(in, cosTab, sinTab, out, rows, heads, seq); break;
        default:  ropeAny<<<blocks, threads, 0, stream>>>(in, cosTab, sinTab, out, rows, heads, seq, headDim / 2); break;
    }
}
