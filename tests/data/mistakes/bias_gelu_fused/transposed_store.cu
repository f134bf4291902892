// 2D grid, threadIdx.x along columns; the result stored through a helper.
#include <cuda_runtime.h>

__device__ inline float gelu_erf(float v) {
    return 0.5f * v * (1.0f + erff(v * 0.70710678f));
}

__device__ inline void store(float* out, int row, int col, int rows, int cols, float v) {
    out[col * rows + row] = v;
}

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, int rows, int cols) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < rows && col < cols) {
        store(out, row, col, rows, cols, gelu_erf(x[row * cols + col] + bias[col]));
    }
}

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols,
                         cudaStream_t stream) {
    dim3 block(64, 4);
    dim3 grid((cols + 63) / 64, (rows + 3) / 4);
    biasGeluFused<<<grid, block, 0, stream>>>(x, bias, out, rows, cols);
}
