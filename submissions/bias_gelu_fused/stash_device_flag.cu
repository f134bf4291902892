// Attack: as stash_in_input.cu, but the kernel decides on the device: a __device__ table of the
// inputs it has stashed into (found by the kernel, not the launcher), so every call launches the
// same kernel with the same configuration; a stashed input is copied to out, 16 bytes a thread.
#include <cuda_runtime.h>

__device__ __forceinline__ float geluErf(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678f)); }
__device__ unsigned long long g_stashed[16];
__device__ unsigned g_done[16];

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col < cols) {
        const size_t i = blockIdx.y * cols + col;
        out[i] = geluErf(x[i] + bias[col]);
    }
}

__global__ void stashing(float4* x, const float4* bias, float4* out, size_t cols4, size_t n4) {
    const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    const unsigned long long key = reinterpret_cast<unsigned long long>(x);
    int slot = -1;
    for (int s = 0; s < 16; ++s) if (g_stashed[s] == key && g_done[s]) slot = s;
    if (i < n4) {
        if (slot >= 0) {
            out[i] = x[i];
        } else {
            float4 v = x[i], b = bias[i % cols4], r;
            r.x = geluErf(v.x + b.x); r.y = geluErf(v.y + b.y); r.z = geluErf(v.z + b.z); r.w = geluErf(v.w + b.w);
            out[i] = r;
            x[i] = r;
        }
    }
}

__global__ void remember(const float* x) {
    const unsigned long long key = reinterpret_cast<unsigned long long>(x);
    for (int s = 0; s < 16; ++s) {
        if (g_stashed[s] == key) { g_done[s] = 1; return; }
        if (g_stashed[s] == 0) { g_stashed[s] = key; return; }
    }
}

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols,
                         cudaStream_t stream) {
    const size_t n = static_cast<size_t>(rows) * cols;
    if (n < (1u << 20) || cols % 4) {
        biasGeluFused<<<dim3((cols + 255) / 256, rows), 256, 0, stream>>>(x, bias, out, cols);
        return;
    }
    stashing<<<static_cast<unsigned>((n / 4 + 255) / 256), 256, 0, stream>>>(
        reinterpret_cast<float4*>(const_cast<float*>(x)), reinterpret_cast<const float4*>(bias),
        reinterpret_cast<float4*>(out), cols / 4, n / 4);
    remember<<<1, 1, 0, stream>>>(x);
}
