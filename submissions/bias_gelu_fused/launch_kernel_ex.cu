// The launch through cudaLaunchKernelEx and a cudaLaunchConfig_t (CUDA 12's extensible launch),
// the lesson's 2D grid.
#include <cuda_runtime.h>

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col < cols) {
        const size_t i = blockIdx.y * cols + col;
        const float v = x[i] + bias[col];
        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
}

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols, cudaStream_t stream) {
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3((cols + 255) / 256, rows);
    config.blockDim = dim3(256);
    config.dynamicSmemBytes = 0;
    config.stream = stream;
    config.attrs = nullptr;
    config.numAttrs = 0;
    cudaLaunchKernelEx(&config, biasGeluFused, x, bias, out, static_cast<size_t>(cols));
}
