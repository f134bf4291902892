// float4 loads when cols is a multiple of 4, one float per thread otherwise.
#include <cuda_runtime.h>

__device__ __forceinline__ float gelu(float v) {
    return 0.5f * v * (1.0f + erff(v * 0.70710678f));
}

__global__ void biasGeluScalar(const float* __restrict__ x, const float* __restrict__ bias,
                               float* __restrict__ out, int rows, int cols) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y;
    if (col < cols && row < rows) {
        size_t i = (size_t)row * cols + col;
        out[i] = gelu(x[i] + bias[col]);
    }
}

__global__ void biasGeluFused(const float4* __restrict__ x4, const float4* __restrict__ bias4,
                             float4* __restrict__ out4, int rows, int cols4) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y;
    if (c >= cols4 || row >= rows) return;
    size_t i = (size_t)row * cols4 + c;
    float4 v = x4[i];
    float4 b = bias4[row];
    float4 r;
    r.x = gelu(v.x + b.x);
    r.y = gelu(v.y + b.y);
    r.z = gelu(v.z + b.z);
    r.w = gelu(v.w + b.w);
    out4[i] = r;
}

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols,
                         cudaStream_t stream) {
    const int threads = 128;
    if ((cols & 3) == 0) {
        int cols4 = cols >> 2;
        dim3 grid((cols4 + threads - 1) / threads, rows);
        biasGeluFused<<<grid, threads, 0, stream>>>((const float4*)x, (const float4*)bias,
                                                   (float4*)out, rows, cols4);
    } else {
        dim3 grid((cols + threads - 1) / threads, rows);
        biasGeluScalar<<<grid, threads, 0, stream>>>(x, bias, out, rows, cols);
    }
}
