// Code brought from elsewhere: the kernel of a KernelBench-style answer for F.gelu(x).sum(0),
// kept under its own name (gelu_sum_forward), with a four-line launcher that launches it on the
// given stream. With launchGeluSum the exercise needs no kernel called geluSum.
#include <cuda_runtime.h>
#include <math.h>

__device__ __forceinline__ float gelu(float v) {
    const float inv_sqrt2 = 0.70710678118654752440f;
    return v * 0.5f * (1.0f + erff(v * inv_sqrt2));
}

__global__ void gelu_sum_forward(const float* __restrict__ input, float* __restrict__ output, int R, int B, int D) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int total = B * D;
    if (idx >= total) return;
    int b = idx / D;
    int d = idx % D;
    float acc = 0.0f;
    for (int r = 0; r < R; ++r) acc += gelu(input[(r * B + b) * D + d]);
    output[idx] = acc;
}

void launchGeluSum(const float* x, float* out, int R, int B, int D, cudaStream_t stream) {
    const int threads = 256;
    const int blocks = (B * D + threads - 1) / threads;
    gelu_sum_forward<<<blocks, threads, 0, stream>>>(x, out, R, B, D);
}
