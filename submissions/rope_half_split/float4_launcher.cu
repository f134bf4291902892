// Sixteen bytes per load: when halfDim is a multiple of 4 each thread rotates four pairs, with a
// float4 from each half of its head and a float4 of cos and of sin; otherwise one pair a thread.
#include <cuda_runtime.h>

__global__ void ropeHalfSplit(const float* __restrict__ in, const float* __restrict__ cosTab,
                              const float* __restrict__ sinTab, float* __restrict__ out, size_t pairs,
                              int halfDim, int heads, int seq) {
    const size_t p = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (p < pairs) {
        const size_t row = p / halfDim, j = p % halfDim;
        const size_t pos = (row / heads) % seq;
        const size_t lo = row * 2 * halfDim + j;
        const float c = cosTab[pos * halfDim + j], s = sinTab[pos * halfDim + j];
        const float x0 = in[lo], x1 = in[lo + halfDim];
        out[lo] = x0 * c - x1 * s;
        out[lo + halfDim] = x0 * s + x1 * c;
    }
}

__global__ void ropeQuads(const float4* __restrict__ in, const float4* __restrict__ cosTab,
                          const float4* __restrict__ sinTab, float4* __restrict__ out, unsigned quads,
                          unsigned halfQuads, unsigned heads, unsigned seq) {
    const unsigned q = blockIdx.x * blockDim.x + threadIdx.x;
    if (q >= quads) return;
    const unsigned row = q / halfQuads, j = q - row * halfQuads;
    const unsigned pos = (row / heads) % seq;
    const size_t lo = static_cast<size_t>(row) * 2 * halfQuads + j;
    const float4 a = in[lo], b = in[lo + halfQuads];
    const float4 c = cosTab[pos * halfQuads + j], s = sinTab[pos * halfQuads + j];
    out[lo] = make_float4(a.x * c.x - b.x * s.x, a.y * c.y - b.y * s.y, a.z * c.z - b.z * s.z, a.w * c.w - b.w * s.w);
    out[lo + halfQuads] = make_float4(a.x * s.x + b.x * c.x, a.y * s.y + b.y * c.y, a.z * s.z + b.z * c.z,
                                      a.w * s.w + b.w * c.w);
}

void launchRope(const float* in, const float* cosTab, const float* sinTab, float* out, int batch, int seq,
                int heads, int headDim, cudaStream_t stream) {
    const int half = headDim / 2;
    const size_t pairs = static_cast<size_t>(batch) * seq * heads * half;
    if (half % 4 == 0 && pairs / 4 < (1u << 31)) {
        const unsigned quads = static_cast<unsigned>(pairs / 4);
        ropeQuads<<<(quads + 255) / 256, 256, 0, stream>>>(
            reinterpret_cast<const float4*>(in), reinterpret_cast<const float4*>(cosTab),
            reinterpret_cast<const float4*>(sinTab), reinterpret_cast<float4*>(out), quads, half / 4, heads, seq);
    } else {
        ropeHalfSplit<<<static_cast<unsigned>((pairs + 255) / 256), 256, 0, stream>>>(in, cosTab, sinTab, out, pairs,
                                                                                    half, heads, seq);
    }
}
