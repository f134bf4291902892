// Bug: each thread stages x + bias in shared memory and then computes its neighbour's
// output from the neighbour's slot, with no __syncthreads() between the write and the read.
// Adding the barrier makes it correct; without it the result depends on the order in which
// threads run (on a GPU a warp's lockstep often hides it).
#include <cuda_runtime.h>

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) {
    __shared__ float tile[256];
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    tile[threadIdx.x] = col < cols ? x[blockIdx.y * cols + col] + bias[col] : 0.0f;
    // missing: __syncthreads();
    const unsigned src = threadIdx.x ^ 1u;
    const size_t srcCol = blockIdx.x * static_cast<size_t>(blockDim.x) + src;
    if (srcCol < cols) {
        const float v = tile[src];
        out[blockIdx.y * cols + srcCol] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
}
