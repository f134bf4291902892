// The whole matrix as one flat array: float4 for the body, a scalar loop for the last n % 4.
#include <cuda_runtime.h>

__device__ __forceinline__ float gelu(float v) {
    return 0.5f * v * (1.0f + erff(v * 0.70710678f));
}

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, int n, int cols) {
    const int n4 = n / 4;
    const int tid = blockIdx.x * blockDim.x + threadIdx.x;
    const int stride = gridDim.x * blockDim.x;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    float4* o4 = reinterpret_cast<float4*>(out);
    for (int i = tid; i < n4; i += stride) {
        float4 v = x4[i];
        int e = i * 4;
        v.x = gelu(v.x + bias[(e + 0) % cols]);
        v.y = gelu(v.y + bias[(e + 1) % cols]);
        v.z = gelu(v.z + bias[(e + 2) % cols]);
        v.w = gelu(v.w + bias[(e + 3) % cols]);
        o4[i] = v;
    }
    const int rem = n % 4;
    if (tid < rem) {
        const int i = n4 + tid;
        out[i] = gelu(x[i] + bias[i % cols]);
    }
}

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols,
                         cudaStream_t stream) {
    const int n = rows * cols;
    int blocks = (n / 4 + 255) / 256;
    if (blocks < 1) blocks = 1;
    if (blocks > 2048) blocks = 2048;
    biasGeluFused<<<blocks, 256, 0, stream>>>(x, bias, out, n, cols);
}
