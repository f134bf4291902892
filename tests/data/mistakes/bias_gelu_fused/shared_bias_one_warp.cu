// The block's slice of the bias loaded into shared memory by the first warp, then used by all.
#include <cuda_runtime.h>

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) {
    __shared__ float tile[256];
    const size_t base = blockIdx.x * (size_t)blockDim.x;
    if (threadIdx.x < 32) {
        for (int k = threadIdx.x; k < 32; k += 32) {
            if (base + k < cols) tile[k] = bias[base + k];
        }
    }
    __syncthreads();
    const size_t col = base + threadIdx.x;
    if (col < cols) {
        const size_t i = blockIdx.y * cols + col;
        const float v = x[i] + tile[threadIdx.x];
        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
}
