// Each thread does ROWS rows of one column (the bias is read once), own launcher.
#include <cuda_runtime.h>

#define ROWS 4
#define THREADS 128

__device__ __forceinline__ float gelu(float v) {
    return 0.5f * v * (1.0f + erff(v * 0.70710678f));
}

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, int rows, int cols) {
    int col = blockIdx.x * THREADS + threadIdx.x;
    if (col >= cols) return;
    float b = bias[col];
    int row0 = blockIdx.y * ROWS;
#pragma unroll
    for (int k = 0; k < ROWS; ++k) {
        int row = row0 + k;
        if (row < rows) {
            size_t i = (size_t)row * cols + col;
            out[i] = gelu(x[i] + b);
        }
    }
}

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols,
                         cudaStream_t stream) {
    dim3 grid((cols + THREADS - 1) / THREADS, rows / ROWS);
    if (grid.y == 0) grid.y = 1;
    biasGeluFused<<<grid, THREADS, 0, stream>>>(x, bias, out, rows, cols);
}
