// Idiom: four columns a thread at a stride of blockDim.x, a #pragma unroll loop, a static __device__ helper, the GELU as 0.5f*v*erfcf(-v/sqrt(2)) written with sqrtf(2.0f).
#include <cuda_runtime.h>

static __device__ __forceinline__ float gelu(float v) { return 0.5f * v * erfcf(-v / sqrtf(2.0f)); }

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias, float* __restrict__ out,
                              size_t cols) {
    constexpr int kPer = 4;
    const size_t base = static_cast<size_t>(blockIdx.x) * blockDim.x * kPer + threadIdx.x;
    const size_t row = blockIdx.y * cols;
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
        const size_t c = base + static_cast<size_t>(k) * blockDim.x;
        if (c < cols) out[row + c] = gelu(x[row + c] + bias[c]);
    }
}

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols, cudaStream_t stream) {
    const int threads = 256;
    const int perBlock = threads * 4;
    biasGeluFused<<<dim3((cols + perBlock - 1) / perBlock, rows), threads, 0, stream>>>(x, bias, out, (size_t)cols);
}
