// Attack: the launcher synchronises the device and sets an L2 persistence limit, host-side
// work a launcher has no business doing.
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

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols,
                         cudaStream_t stream) {
    cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 32 << 20);
    const dim3 grid((cols + 255) / 256, rows);
    biasGeluFused<<<grid, 256, 0, stream>>>(x, bias, out, cols);
    cudaDeviceSynchronize();
}
