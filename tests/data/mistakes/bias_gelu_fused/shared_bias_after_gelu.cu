// The bias staged in shared memory once per block, then GELU and the bias per element.
#include <cuda_runtime.h>

#define BLOCK 256

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) {
    __shared__ float sBias[BLOCK];
    const size_t col = blockIdx.x * (size_t)BLOCK + threadIdx.x;
    sBias[threadIdx.x] = col < cols ? bias[col] : 0.0f;
    __syncthreads();
    if (col < cols) {
        const size_t i = blockIdx.y * cols + col;
        const float v = x[i];
        const float g = 0.5f * v * (1.0f + erff(v * 0.70710678f));
        out[i] = g + sBias[threadIdx.x];
    }
}
