// Idiom: a 1-D grid-stride loop with int64_t indices, the grid from a helper capped with std::min, the GELU with erf and M_SQRT1_2 (double constant, float math), cudaGetLastError after the launch.
#include <cuda_runtime.h>
#include <algorithm>
#include <cmath>
#include <cstdint>

static __device__ float gelu(float v) { return 0.5f * v * (1.0f + erff(v * (float)M_SQRT1_2)); }

__global__ void gelu_sum_gs(const float* __restrict__ x, float* __restrict__ out, int64_t R, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float acc = 0.f;
        for (int64_t r = 0; r < R; ++r) acc += gelu(x[r * n + i]);
        out[i] = acc;
    }
}

static int gridFor(int64_t n, int threads) { return (int)std::min<int64_t>((n + threads - 1) / threads, 120); }

void launchGeluSum(const float* x, float* out, int R, int B, int D, cudaStream_t stream) {
    const int64_t n = (int64_t)B * D;
    gelu_sum_gs<<<gridFor(n, 128), 128, 0, stream>>>(x, out, R, n);
    (void)cudaGetLastError();
}
