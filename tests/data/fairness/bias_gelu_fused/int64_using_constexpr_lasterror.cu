// Idiom: `using` aliases, int64_t indices, a static constexpr constant in a struct, a launcher that checks cudaGetLastError() and grid from a constexpr helper.
#include <cuda_runtime.h>
#include <cstdint>
#include <cstdio>

using index_t = std::int64_t;
using cfloat_ptr = const float* __restrict__;

struct GeluConst {
    static constexpr float kInvSqrt2 = 0.70710678118654752440f;
    static constexpr float kHalf = 0.5f;
};

constexpr int ceilDiv(int a, int b) { return (a + b - 1) / b; }

__global__ void biasGeluFused(cfloat_ptr x, cfloat_ptr bias, float* __restrict__ out, size_t cols) {
    const index_t col = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const index_t ncols = static_cast<index_t>(cols);
    if (col >= ncols) return;
    const index_t i = static_cast<index_t>(blockIdx.y) * ncols + col;
    const float v = x[i] + bias[col];
    out[i] = GeluConst::kHalf * v * (1.0f + erff(v * GeluConst::kInvSqrt2));
}

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols, cudaStream_t stream) {
    constexpr int kThreads = 256;
    const dim3 grid(ceilDiv(cols, kThreads), rows);
    biasGeluFused<<<grid, kThreads, 0, stream>>>(x, bias, out, static_cast<size_t>(cols));
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) std::fprintf(stderr, "biasGeluFused launch failed: %s\n", cudaGetErrorString(err));
}
