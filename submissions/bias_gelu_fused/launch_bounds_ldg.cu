// __launch_bounds__, __ldg and an unrolled loop of two columns a thread.
#define THREADS 128

__global__ void __launch_bounds__(THREADS) biasGeluFused(const float* __restrict__ x,
                                                         const float* __restrict__ bias,
                                                         float* __restrict__ out, size_t cols) {
    const size_t base = (blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x) * 2;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
        const size_t col = base + k;
        if (col < cols) {
            const size_t i = blockIdx.y * cols + col;
            const float v = __ldg(x + i) + __ldg(bias + col);
            out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
        }
    }
}

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols,
                         cudaStream_t stream) {
    const int perBlock = 2 * THREADS;
    biasGeluFused<<<dim3((cols + perBlock - 1) / perBlock, rows), THREADS, 0, stream>>>(x, bias, out, cols);
}
