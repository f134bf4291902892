// The block's slice of the bias staged in shared memory once, then read by every thread of it:
// a habit from tiled kernels (the bias is cache-resident anyway), with the barrier in place.
#include <cuda_runtime.h>

constexpr int kBlock = 256;

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) {
    __shared__ float tile[kBlock];
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    tile[threadIdx.x] = col < cols ? bias[col] : 0.0f;
    __syncthreads();
    if (col < cols) {
        const size_t i = blockIdx.y * cols + col;
        const float v = x[i] + tile[threadIdx.x];
        out[i] = v * normcdff(v);
    }
}

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols,
                         cudaStream_t stream) {
    dim3 grid((cols + kBlock - 1) / kBlock, rows);
    biasGeluFused<<<grid, kBlock, 0, stream>>>(x, bias, out, static_cast<size_t>(cols));
}
