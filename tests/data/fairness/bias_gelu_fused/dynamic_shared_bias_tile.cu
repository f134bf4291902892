// Idiom: the bias tile staged in dynamic shared memory (extern __shared__), __syncthreads, each block loops over several rows; blockDim-agnostic.
#include <cuda_runtime.h>

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias, float* __restrict__ out,
                              size_t cols, int rows, int rowsPerBlock) {
    extern __shared__ float sBias[];
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    sBias[threadIdx.x] = col < cols ? bias[col] : 0.0f;
    __syncthreads();
    if (col >= cols) return;
    const int r0 = blockIdx.y * rowsPerBlock;
    const int r1 = min(r0 + rowsPerBlock, rows);
    for (int r = r0; r < r1; ++r) {
        const size_t i = static_cast<size_t>(r) * cols + col;
        const float v = x[i] + sBias[threadIdx.x];
        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
}

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols, cudaStream_t stream) {
    const int threads = 128, rowsPerBlock = 4;
    dim3 grid((cols + threads - 1) / threads, (rows + rowsPerBlock - 1) / rowsPerBlock);
    biasGeluFused<<<grid, threads, threads * sizeof(float), stream>>>(x, bias, out, (size_t)cols, rows, rowsPerBlock);
}
