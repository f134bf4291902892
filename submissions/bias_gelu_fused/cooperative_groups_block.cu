// The bias row staged in shared memory, synchronised with cooperative groups' block sync.
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) {
    __shared__ float tile[256];
    cg::thread_block block = cg::this_thread_block();
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    tile[threadIdx.x] = col < cols ? bias[col] : 0.0f;
    block.sync();
    if (col < cols) {
        const size_t i = blockIdx.y * cols + col;
        const float v = x[i] + tile[threadIdx.x];
        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
}
