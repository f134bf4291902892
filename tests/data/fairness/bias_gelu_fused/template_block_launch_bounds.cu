// Idiom: a kernel templated on its block size with __launch_bounds__(BS), launched as biasGeluFused<128> from a launcher (2-D grid).
#include <cuda_runtime.h>
#include <cmath>

template <int BS>
__global__ void __launch_bounds__(BS) biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                                                    float* __restrict__ out, size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(BS) + threadIdx.x;
    if (col >= cols) return;
    const size_t i = blockIdx.y * cols + col;
    const float v = x[i] + bias[col];
    out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
}

template __global__ void biasGeluFused<128>(const float* __restrict__, const float* __restrict__, float* __restrict__, size_t);

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols, cudaStream_t stream) {
    constexpr int kBlock = 128;
    dim3 grid((cols + kBlock - 1) / kBlock, rows);
    biasGeluFused<kBlock><<<grid, kBlock, 0, stream>>>(x, bias, out, static_cast<size_t>(cols));
}
