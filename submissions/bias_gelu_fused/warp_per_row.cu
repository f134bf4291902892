// One warp per row: the 32 lanes walk the row's columns together (coalesced), eight rows a block.
#include <cuda_runtime.h>

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) {
    // unused with this file's launcher; kept so the exercise's default launch would work too
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col < cols) {
        const size_t i = blockIdx.y * cols + col;
        const float v = x[i] + bias[col];
        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
}

__global__ void rowsByWarps(const float* __restrict__ x, const float* __restrict__ bias,
                            float* __restrict__ out, int rows, int cols) {
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / warpSize;
    const int lane = threadIdx.x % warpSize;
    if (warp >= rows) return;
    const float* xr = x + static_cast<size_t>(warp) * cols;
    float* outr = out + static_cast<size_t>(warp) * cols;
    for (int c = lane; c < cols; c += warpSize) {
        const float v = xr[c] + bias[c];
        outr[c] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
}

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols,
                         cudaStream_t stream) {
    const int warpsPerBlock = 8;
    const int blocks = (rows + warpsPerBlock - 1) / warpsPerBlock;
    rowsByWarps<<<blocks, warpsPerBlock * 32, 0, stream>>>(x, bias, out, rows, cols);
}
