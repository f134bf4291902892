// A grid-stride loop over float4s (16-byte aligned pointers and cols a multiple of 4, else a scalar
// loop), the grid capped at eight blocks per SM from cudaDeviceGetAttribute, from its own launcher.
#include <cuda_runtime.h>
#include <cstdint>

__device__ __forceinline__ float gelu(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678f)); }

__global__ void biasGeluFused(const float4* __restrict__ x, const float4* __restrict__ bias,
                               float4* __restrict__ out, size_t quadsPerRow, size_t quads) {
    for (size_t q = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; q < quads;
         q += static_cast<size_t>(gridDim.x) * blockDim.x) {
        const float4 v = x[q], b = bias[q % quadsPerRow];
        out[q] = make_float4(gelu(v.x + b.x), gelu(v.y + b.y), gelu(v.z + b.z), gelu(v.w + b.w));
    }
}

__global__ void biasGeluScalar(const float* __restrict__ x, const float* __restrict__ bias,
                               float* __restrict__ out, size_t cols, size_t n) {
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<size_t>(gridDim.x) * blockDim.x)
        out[i] = gelu(x[i] + bias[i % cols]);
}

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols, cudaStream_t stream) {
    int device = 0, sms = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    const size_t n = static_cast<size_t>(rows) * cols;
    const int blocks = sms * 8;
    const bool aligned = cols % 4 == 0 && (reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(bias) |
                                           reinterpret_cast<uintptr_t>(out)) % 16 == 0;
    if (aligned)
        biasGeluFused<<<blocks, 256, 0, stream>>>(reinterpret_cast<const float4*>(x), reinterpret_cast<const float4*>(bias),
                                                   reinterpret_cast<float4*>(out), cols / 4, n / 4);
    else
        biasGeluScalar<<<blocks, 256, 0, stream>>>(x, bias, out, cols, n);
}
