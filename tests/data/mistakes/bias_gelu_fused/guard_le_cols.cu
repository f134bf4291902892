// A block per row, threads stride along the row.
#include <cuda_runtime.h>

__device__ float gelu(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678f)); }

__global__ void biasGeluFused(const float* x, const float* bias, float* out, int cols) {
    const float* xr = x + (size_t)blockIdx.x * cols;
    float* outr = out + (size_t)blockIdx.x * cols;
    for (int c = threadIdx.x; c <= cols; c += blockDim.x) {
        outr[c] = gelu(xr[c] + bias[c]);
    }
}

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols,
                         cudaStream_t stream) {
    biasGeluFused<<<rows, 256, 0, stream>>>(x, bias, out, cols);
}
