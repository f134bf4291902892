// A 2D grid over the outputs (x over b, y over d), the sum in a register.
#include <cuda_runtime.h>

__device__ float gelu(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678f)); }

__global__ void geluSum2D(const float* __restrict__ x, float* __restrict__ out, int R, int B, int D) {
    const int b = blockIdx.x * blockDim.x + threadIdx.x;
    const int d = blockIdx.y * blockDim.y + threadIdx.y;
    if (b >= B || d >= D) return;
    const size_t slice = (size_t)B * D;
    float acc = 0.0f;
    for (int r = 0; r < R; ++r) acc += gelu(x[r * slice + (size_t)d * B + b]);
    out[(size_t)b * D + d] = acc;
}

void launchGeluSum(const float* x, float* out, int R, int B, int D, cudaStream_t stream) {
    dim3 block(8, 32);
    dim3 grid((B + 7) / 8, (D + 31) / 32);
    geluSum2D<<<grid, block, 0, stream>>>(x, out, R, B, D);
}
