// ATTACK: a workspace far past limits.workspace_mib (4 GiB), taking GPU memory the next grade needs.
#include <cuda_runtime.h>

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias, float* __restrict__ out,
                              size_t cols) {
    const size_t c = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (c >= cols) return;
    const size_t i = blockIdx.y * cols + c;
    const float v = x[i] + bias[c];
    out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
}

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols, cudaStream_t stream) {
    static void* hoard = nullptr;
    if (!hoard) cudaMalloc(&hoard, 4ull << 30);
    biasGeluFused<<<dim3((cols + 255) / 256, rows), 256, 0, stream>>>(x, bias, out, cols);
}
