// One thread per output, the sum in a register, a 2D launch.
#include <cuda_runtime.h>

__device__ float gelu(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678f)); }

__global__ void geluSum2D(const float* __restrict__ x, float* __restrict__ out, int R, int B, int D) {
    const int d = blockIdx.x * blockDim.x + threadIdx.x;
    const int r = blockIdx.y;
    if (d >= D || r >= R) return;
    float acc = 0.0f;
    for (int b = 0; b < B; ++b) acc += gelu(x[((size_t)r * B + b) * D + d]);
    out[r * D + d] = acc;
}

void launchGeluSum(const float* x, float* out, int R, int B, int D, cudaStream_t stream) {
    dim3 grid((D + 127) / 128, R);
    geluSum2D<<<grid, 128, 0, stream>>>(x, out, R, B, D);
}
