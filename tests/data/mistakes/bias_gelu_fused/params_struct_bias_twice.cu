// A struct of parameters and a templated block size, own launcher.
#include <cuda_runtime.h>

struct GeluParams {
    const float* x;
    const float* bias;
    float* out;
    int rows;
    int cols;
};

__device__ __forceinline__ float gelu(float v) {
    return 0.5f * v * (1.0f + erff(v * 0.70710678f));
}

template <int BLOCK>
__global__ void biasGeluFused(GeluParams p) {
    const int col = blockIdx.x * BLOCK + threadIdx.x;
    const int row = blockIdx.y;
    if (col >= p.cols) return;
    const size_t i = (size_t)row * p.cols + col;
    const float b = p.bias[col];
    const float v = p.x[i] + b;
    p.out[i] = gelu(v + b);
}

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols,
                         cudaStream_t stream) {
    GeluParams p{x, bias, out, rows, cols};
    constexpr int B = 256;
    dim3 grid((cols + B - 1) / B, rows);
    biasGeluFused<B><<<grid, B, 0, stream>>>(p);
}
