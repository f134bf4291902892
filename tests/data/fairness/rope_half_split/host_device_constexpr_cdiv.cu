// Idiom: a __host__ __device__ constexpr cdiv helper for the grid, one thread per (row, head-half) with an inner loop over j, `int` everywhere, sincos-free table reads.
#include <cuda_runtime.h>

__host__ __device__ constexpr int cdiv(int a, int b) { return (a + b - 1) / b; }

__global__ void ropeRows(const float* __restrict__ in, const float* __restrict__ cosTab, const float* __restrict__ sinTab,
                         float* __restrict__ out, int rows, int half, int heads, int seq) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const int pos = (row / heads) % seq;
    const float* c = cosTab + pos * half;
    const float* s = sinTab + pos * half;
    const float* a = in + static_cast<long long>(row) * 2 * half;
    float* y = out + static_cast<long long>(row) * 2 * half;
    for (int j = 0; j < half; ++j) {
        const float lo = a[j], hi = a[j + half];
        y[j] = lo * c[j] - hi * s[j];
        y[j + half] = lo * s[j] + hi * c[j];
    }
}

void launchRope(const float* in, const float* cosTab, const float* sinTab, float* out, int batch, int seq, int heads,
                int headDim, cudaStream_t stream) {
    const int rows = batch * seq * heads;
    ropeRows<<<cdiv(rows, 128), 128, 0, stream>>>(in, cosTab, sinTab, out, rows, headDim / 2, heads, seq);
}
