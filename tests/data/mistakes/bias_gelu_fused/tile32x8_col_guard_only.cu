// 2D tiles of 32x8 threads: x is the column, y is the row, own launcher.
#include <cuda_runtime.h>

#define TILE_X 32
#define TILE_Y 8

__device__ float gelu(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678f)); }

__global__ void biasGeluFused(const float* x, const float* bias, float* out, int rows, int cols) {
    int col = blockIdx.x * TILE_X + threadIdx.x;
    int row = blockIdx.y * TILE_Y + threadIdx.y;
    if (col < cols) {
        int i = row * cols + col;
        out[i] = gelu(x[i] + bias[col]);
    }
}

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols,
                         cudaStream_t stream) {
    dim3 block(TILE_X, TILE_Y);
    dim3 grid((cols + TILE_X - 1) / TILE_X, (rows + TILE_Y - 1) / TILE_Y);
    biasGeluFused<<<grid, block, 0, stream>>>(x, bias, out, rows, cols);
}
