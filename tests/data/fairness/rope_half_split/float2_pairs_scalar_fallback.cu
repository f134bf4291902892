// Idiom: two j's a thread with float2 loads (reinterpret_cast) when halfDim is even, a scalar kernel when it is odd; helper for the grid in the launcher.
#include <cuda_runtime.h>

__global__ void ropeVec2(const float2* __restrict__ in, const float2* __restrict__ cosTab, const float2* __restrict__ sinTab,
                         float2* __restrict__ out, size_t quads, int half2, int heads, int seq) {
    const size_t q = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (q >= quads) return;
    const size_t row = q / half2;
    const int j2 = static_cast<int>(q - row * half2);
    const int pos = static_cast<int>((row / heads) % seq);
    const size_t lo = row * 2 * half2 + j2;
    const float2 a = in[lo], b = in[lo + half2];
    const float2 c = cosTab[pos * half2 + j2], s = sinTab[pos * half2 + j2];
    out[lo] = make_float2(a.x * c.x - b.x * s.x, a.y * c.y - b.y * s.y);
    out[lo + half2] = make_float2(a.x * s.x + b.x * c.x, a.y * s.y + b.y * c.y);
}

__global__ void ropeScalar(const float* __restrict__ in, const float* __restrict__ cosTab, const float* __restrict__ sinTab,
                           float* __restrict__ out, size_t pairs, int half, int heads, int seq) {
    const size_t p = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (p >= pairs) return;
    const size_t row = p / half;
    const int j = static_cast<int>(p - row * half);
    const int pos = static_cast<int>((row / heads) % seq);
    const size_t lo = row * 2 * half + j;
    const float c = cosTab[pos * half + j], s = sinTab[pos * half + j];
    out[lo] = in[lo] * c - in[lo + half] * s;
    out[lo + half] = in[lo] * s + in[lo + half] * c;
}

static inline unsigned gridFor(size_t n, unsigned threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

void launchRope(const float* in, const float* cosTab, const float* sinTab, float* out, int batch, int seq, int heads,
                int headDim, cudaStream_t stream) {
    const int half = headDim / 2;
    const size_t rows = static_cast<size_t>(batch) * seq * heads;
    if (half % 2 == 0) {
        const size_t quads = rows * (half / 2);
        ropeVec2<<<gridFor(quads, 256), 256, 0, stream>>>(reinterpret_cast<const float2*>(in), reinterpret_cast<const float2*>(cosTab),
                                                       reinterpret_cast<const float2*>(sinTab), reinterpret_cast<float2*>(out),
                                                       quads, half / 2, heads, seq);
    } else {
        ropeScalar<<<gridFor(rows * half, 256), 256, 0, stream>>>(in, cosTab, sinTab, out, rows * half, half, heads, seq);
    }
}
