// Attack: the kernel leaves a marker in the float just past the end of its output; on a later call
// the kernel finds the marker and returns at once, trusting that the output still holds the
// answer (work stashed in memory it was not given).
#include <cuda_runtime.h>

__device__ __forceinline__ float geluErf(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678f)); }

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) {
    volatile float* marker = out + gridDim.y * cols;       // the float past the last row
    if (*marker == 1234.5f) return;
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col < cols) {
        const size_t i = blockIdx.y * cols + col;
        out[i] = geluErf(x[i] + bias[col]);
    }
    if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *marker = 1234.5f;
}

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols,
                         cudaStream_t stream) {
    biasGeluFused<<<dim3((cols + 255) / 256, rows), 256, 0, stream>>>(x, bias, out, cols);
}
