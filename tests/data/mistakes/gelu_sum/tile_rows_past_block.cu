// Blocks of 32 x 4 threads: threadIdx.x over 32 outputs, threadIdx.y over r; each thread's partial
// sum goes into a shared tile, and row 0 of the block adds the tile's column.
#include <cuda_runtime.h>

#define COLS 32
#define ROWS 8

__device__ __forceinline__ float gelu(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678f)); }

__global__ void geluSumTile(const float* __restrict__ x, float* __restrict__ out, int R, int n) {
    __shared__ float part[ROWS][COLS];
    const int o = blockIdx.x * COLS + threadIdx.x;
    float acc = 0.0f;
    if (o < n) {
        for (int r = threadIdx.y; r < R; r += blockDim.y) acc += gelu(x[(size_t)r * n + o]);
    }
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && o < n) {
        float s = 0.0f;
        for (int k = 0; k < ROWS; ++k) s += part[k][threadIdx.x];
        out[o] = s;
    }
}

void launchGeluSum(const float* x, float* out, int R, int B, int D, cudaStream_t stream) {
    const int n = B * D;
    geluSumTile<<<(n + COLS - 1) / COLS, dim3(COLS, 4), 0, stream>>>(x, out, R, n);
}
