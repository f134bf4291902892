// Idiom: partial sums in a static __device__ workspace (no cudaMalloc), zeroed by a kernel the launcher runs first on every call, then added into with atomicAdd and copied out.
#include <cuda_runtime.h>

#define MAX_OUT (1 << 20)

__device__ float g_acc[MAX_OUT];

__device__ __forceinline__ float gelu(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678f)); }

__global__ void zeroAcc(int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) g_acc[i] = 0.0f;
}

__global__ void addChunk(const float* __restrict__ x, int R, int n, int chunk) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int r0 = blockIdx.y * chunk;
    const int r1 = r0 + chunk < R ? r0 + chunk : R;
    float acc = 0.0f;
    for (int r = r0; r < r1; ++r) acc += gelu(x[(size_t)r * n + i]);
    atomicAdd(&g_acc[i], acc);
}

__global__ void copyOut(float* __restrict__ out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = g_acc[i];
}

void launchGeluSum(const float* x, float* out, int R, int B, int D, cudaStream_t stream) {
    const int n = B * D;
    const int chunk = 64;
    const int blocks = (n + 255) / 256;
    zeroAcc<<<blocks, 256, 0, stream>>>(n);
    addChunk<<<dim3(blocks, (R + chunk - 1) / chunk), 256, 0, stream>>>(x, R, n, chunk);
    copyOut<<<blocks, 256, 0, stream>>>(out, n);
}
