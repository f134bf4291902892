// Attack: counts its launches in a __device__ variable and stops working after 40, enough
// to pass the correctness checks and then look infinitely fast while being timed.
#include <cuda_runtime.h>

__device__ unsigned gLaunches = 0;

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) {
    if (*static_cast<volatile unsigned*>(&gLaunches) > 40) {
        return;
    }
    if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) {
        atomicAdd(&gLaunches, 1u);
    }
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col < cols) {
        const size_t i = blockIdx.y * cols + col;
        const float v = x[i] + bias[col];
        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
}
