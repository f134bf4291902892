// Idiom: the arguments packed in a struct passed by value, and a kernel chosen at run time through a function pointer (`auto kern = ...; kern<<<...>>>(p)`); std::erf-free, int indices.
#include <cuda_runtime.h>

struct RopeParams {
    const float* in;
    const float* cosTab;
    const float* sinTab;
    float* out;
    int rows, half, heads, seq;
};

__global__ void ropePerPair(RopeParams p) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= p.rows * p.half) return;
    const int row = t / p.half, j = t % p.half;
    const int pos = (row / p.heads) % p.seq;
    const size_t lo = static_cast<size_t>(row) * 2 * p.half + j;
    const float c = p.cosTab[pos * p.half + j], s = p.sinTab[pos * p.half + j];
    const float a = p.in[lo], b = p.in[lo + p.half];
    p.out[lo] = a * c - b * s;
    p.out[lo + p.half] = a * s + b * c;
}

__global__ void ropePerRow(RopeParams p) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= p.rows) return;
    const int pos = (row / p.heads) % p.seq;
    for (int j = 0; j < p.half; ++j) {
        const size_t lo = static_cast<size_t>(row) * 2 * p.half + j;
        const float c = p.cosTab[pos * p.half + j], s = p.sinTab[pos * p.half + j];
        const float a = p.in[lo], b = p.in[lo + p.half];
        p.out[lo] = a * c - b * s;
        p.out[lo + p.half] = a * s + b * c;
    }
}

void launchRope(const float* in, const float* cosTab, const float* sinTab, float* out, int batch, int seq, int heads,
                int headDim, cudaStream_t stream) {
    const RopeParams p{in, cosTab, sinTab, out, batch * seq * heads, headDim / 2, heads, seq};
    const bool small = p.half < 8;
    auto kern = small ? ropePerRow : ropePerPair;
    const int work = small ? p.rows : p.rows * p.half;
    kern<<<(work + 255) / 256, 256, 0, stream>>>(p);
}
