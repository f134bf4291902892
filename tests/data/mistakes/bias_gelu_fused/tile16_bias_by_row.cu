// 16x16 tiles, both coordinates guarded, own launcher.
#include <cuda_runtime.h>

constexpr int BS = 16;

__device__ float geluExact(float v) {
    return 0.5f * v * (1.0f + erff(v * 0.70710678f));
}

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                                float* __restrict__ out, int rows, int cols) {
    const int c = blockIdx.x * BS + threadIdx.x;
    const int r = blockIdx.y * BS + threadIdx.y;
    if (r < rows && c < cols) {
        const int idx = r * cols + c;
        out[idx] = geluExact(x[idx] + bias[r]);
    }
}

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols,
                         cudaStream_t stream) {
    dim3 block(BS, BS);
    dim3 grid((cols + BS - 1) / BS, (rows + BS - 1) / BS);
    biasGeluFused<<<grid, block, 0, stream>>>(x, bias, out, rows, cols);
}
