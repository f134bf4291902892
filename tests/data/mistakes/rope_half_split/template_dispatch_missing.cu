// The head size as a template parameter (the loop over j unrolls), dispatched in the launcher.
#include <cuda_runtime.h>

template <int HALF>
__global__ void ropeT(const float* __restrict__ in, const float* __restrict__ cosTab,
                      const float* __restrict__ sinTab, float* __restrict__ out, int rows, int heads,
                      int seq) {
    const int row = blockIdx.x * blockDim.y + threadIdx.y;
    if (row >= rows) return;
    const int pos = (row / heads) % seq;
    const float* x = in + (size_t)row * 2 * HALF;
    float* y = out + (size_t)row * 2 * HALF;
#pragma unroll
    for (int j = threadIdx.x; j < HALF; j += 32) {
        const float c = cosTab[pos * HALF + j], s = sinTab[pos * HALF + j];
        const float x0 = x[j], x1 = x[j + HALF];
        y[j] = x0 * c - x1 * s;
        y[j + HALF] = x0 * s + x1 * c;
    }
}

template <int HALF>
static void run(const float* in, const float* c, const float* s, float* out, int rows, int heads,
                int seq, cudaStream_t stream) {
    dim3 block(32, 4);
    ropeT<HALF><<<(rows + 3) / 4, block, 0, stream>>>(in, c, s, out, rows, heads, seq);
}

void launchRope(const float* in, const float* cosTab, const float* sinTab, float* out, int batch,
                int seq, int heads, int headDim, cudaStream_t stream) {
    const int rows = batch * seq * heads;
    switch (headDim) {
        case 64: run<32>(in, cosTab, sinTab, out, rows, heads, seq, stream); break;
        case 128: run<64>(in, cosTab, sinTab, out, rows, heads, seq, stream); break;
        case 256: run<128>(in, cosTab, sinTab, out, rows, heads, seq, stream); break;
        default: break;
    }
}
