// GELU as in the BERT code (the tanh formula, tanh written with one expf), own launcher.
#include <cuda_runtime.h>

__device__ __forceinline__ float gelu(float v) {
    const float k = 0.7978845608f;                 // sqrt(2 / pi)
    const float u = k * (v + 0.044715f * v * v * v);
    const float t = 2.0f / (1.0f + expf(-2.0f * u)) - 1.0f;   // tanh(u)
    return 0.5f * v * (1.0f + t);
}

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, int rows, int cols) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y;
    if (row < rows && col < cols) {
        const size_t i = (size_t)row * cols + col;
        out[i] = gelu(x[i] + bias[col]);
    }
}

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols,
                         cudaStream_t stream) {
    dim3 grid((cols + 127) / 128, rows);
    biasGeluFused<<<grid, 128, 0, stream>>>(x, bias, out, rows, cols);
}
