// Idiom: C++14 digit separators (65'535, 1'000) in correct code, one of them inside the launch's <<<...>>> (a grid capped at 65'535 blocks, with a grid-stride loop).
#include <cuda_runtime.h>
#include <algorithm>

constexpr int kThreads = 256;
constexpr float kInvSqrt2 = 0.707'106'78f;

__global__ void geluSumCapped(const float* __restrict__ x, float* __restrict__ out, int R, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        float acc = 0.f;
        for (int r = 0; r < R; ++r) {
            const float v = x[static_cast<size_t>(r) * n + i];
            acc += 0.5f * v * (1.0f + erff(v * kInvSqrt2));
        }
        out[i] = acc;
    }
}

void launchGeluSum(const float* x, float* out, int R, int B, int D, cudaStream_t stream) {
    const int n = B * D;
    const int blocks = (n + kThreads - 1) / kThreads;
    geluSumCapped<<<std::min(blocks, 65'535), kThreads, 0, stream>>>(x, out, R, n);
}
