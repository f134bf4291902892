// Atomic accumulation into a workspace of my own (kept between calls), copied to out at the end.
#include <cuda_runtime.h>

static float* g_acc = nullptr;
static size_t g_cap = 0;

__device__ __forceinline__ float gelu(float v) {
    return 0.5f * v * (1.0f + erff(v * 0.70710678f));
}

__global__ void accumulate(const float* __restrict__ x, float* acc, int R, int n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)R * n) return;
    atomicAdd(&acc[i % n], gelu(x[i]));
}

void launchGeluSum(const float* x, float* out, int R, int B, int D, cudaStream_t stream) {
    const int n = B * D;
    if ((size_t)n > g_cap) {
        if (g_acc) cudaFree(g_acc);
        cudaMalloc(&g_acc, n * sizeof(float));
        g_cap = n;
    }
    const size_t total = (size_t)R * n;
    accumulate<<<(unsigned)((total + 255) / 256), 256, 0, stream>>>(x, g_acc, R, n);
    cudaMemcpyAsync(out, g_acc, n * sizeof(float), cudaMemcpyDeviceToDevice, stream);
}
