// Idiom: a functor with operator() doing the rotation, a 1-D grid-stride loop over pairs with size_t, launched with a fixed small grid from launchRope.
#include <cuda_runtime.h>

struct Rotate {
    __device__ void operator()(float a, float b, float c, float s, float& lo, float& hi) const {
        lo = a * c - b * s;
        hi = a * s + b * c;
    }
};

template <class Op>
__global__ void ropeGridStride(const float* __restrict__ in, const float* __restrict__ cosTab,
                               const float* __restrict__ sinTab, float* __restrict__ out, size_t pairs, int half,
                               int heads, int seq, Op op) {
    for (size_t p = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; p < pairs;
         p += static_cast<size_t>(gridDim.x) * blockDim.x) {
        const size_t row = p / half, j = p % half;
        const size_t pos = (row / heads) % seq;
        const size_t lo = row * 2 * half + j;
        op(in[lo], in[lo + half], cosTab[pos * half + j], sinTab[pos * half + j], out[lo], out[lo + half]);
    }
}

void launchRope(const float* in, const float* cosTab, const float* sinTab, float* out, int batch, int seq, int heads,
                int headDim, cudaStream_t stream) {
    const size_t pairs = static_cast<size_t>(batch) * seq * heads * (headDim / 2);
    ropeGridStride<<<24, 96, 0, stream>>>(in, cosTab, sinTab, out, pairs, headDim / 2, heads, seq, Rotate{});
}
