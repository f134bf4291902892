// A block per output element: 128 threads over r, then a tree reduction in shared memory.
#include <cuda_runtime.h>

#define THREADS 128

__device__ float gelu(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678f)); }

__global__ void geluSumBlock(const float* __restrict__ x, float* __restrict__ out, int R, int n) {
    __shared__ float partial[THREADS];
    const int o = blockIdx.x;
    float acc = 0.0f;
    for (int r = threadIdx.x; r < R; r += THREADS) acc += gelu(x[(size_t)r * n + o]);
    partial[threadIdx.x] = acc;
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    }
    if (threadIdx.x == 0) out[o] = partial[0];
}

void launchGeluSum(const float* x, float* out, int R, int B, int D, cudaStream_t stream) {
    geluSumBlock<<<B * D, THREADS, 0, stream>>>(x, out, R, B * D);
}
