// Idiom: a double accumulator (the GELU in float, the sum in double), and the CUDA_CHECK do { } while (0) macro with line splices around the launch and cudaGetLastError().
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>

#define CUDA_CHECK(call)                                                          \
    do {                                                                          \
        cudaError_t err_ = (call);                                                \
        if (err_ != cudaSuccess) {                                                \
            std::fprintf(stderr, "CUDA error %s at %s:%d\n",                      \
                         cudaGetErrorString(err_), __FILE__, __LINE__);           \
            std::exit(1);                                                         \
        }                                                                         \
    } while (0)

__global__ void geluSumF64(const float* __restrict__ x, float* __restrict__ out, int R, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double acc = 0.0;
    for (int r = 0; r < R; ++r) {
        const float v = x[static_cast<size_t>(r) * n + i];
        acc += 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
    out[i] = static_cast<float>(acc);
}

void launchGeluSum(const float* x, float* out, int R, int B, int D, cudaStream_t stream) {
    const int n = B * D;
    geluSumF64<<<(n + 255) / 256, 256, 0, stream>>>(x, out, R, n);
    CUDA_CHECK(cudaGetLastError());
}
