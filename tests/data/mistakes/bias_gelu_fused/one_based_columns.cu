// One thread per row, looping over the columns (numbered from 1 as in the notes).
#include <cuda_runtime.h>

__device__ float geluf(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678f)); }

__global__ void biasGeluFused(const float* x, const float* bias, float* out, int rows, int cols) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    for (int c = 1; c <= cols; ++c) {
        out[row * cols + c - 1] = geluf(x[row * cols + c] + bias[c - 1]);
    }
}

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols,
                         cudaStream_t stream) {
    biasGeluFused<<<(rows + 63) / 64, 64, 0, stream>>>(x, bias, out, rows, cols);
}
