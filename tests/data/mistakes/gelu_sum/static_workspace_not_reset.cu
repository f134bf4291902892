// Partial sums in a __device__ array (zero at load, no cudaMalloc needed), then copied to out.
#include <cuda_runtime.h>

#define MAX_OUT (1 << 20)

__device__ float g_sum[MAX_OUT];

__device__ __forceinline__ float gelu(float v) {
    return 0.5f * v * (1.0f + erff(v * 0.70710678f));
}

__global__ void addSlices(const float* __restrict__ x, int R, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float acc = 0.0f;
    for (int r = 0; r < R; ++r) acc += gelu(x[(size_t)r * n + i]);
    g_sum[i] += acc;
}

__global__ void copyOut(float* __restrict__ out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = g_sum[i];
}

void launchGeluSum(const float* x, float* out, int R, int B, int D, cudaStream_t stream) {
    const int n = B * D;
    addSlices<<<(n + 255) / 256, 256, 0, stream>>>(x, R, n);
    copyOut<<<(n + 255) / 256, 256, 0, stream>>>(out, n);
}
