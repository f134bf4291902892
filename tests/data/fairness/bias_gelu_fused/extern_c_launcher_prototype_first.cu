// Idiom: C style: the kernel's prototype first, an extern "C" launcher (the ctypes habit) in the middle, the kernel's definition at the end of the file.
#include <cuda_runtime.h>

__global__ void biasGeluFused(const float* x, const float* bias, float* out, size_t cols);

extern "C" void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols, cudaStream_t stream) {
    dim3 block(256);
    dim3 grid((cols + block.x - 1) / block.x, rows);
    biasGeluFused<<<grid, block, 0, stream>>>(x, bias, out, (size_t)cols);
}

__global__ void biasGeluFused(const float* x, const float* bias, float* out, size_t cols) {
    size_t c = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (c < cols) {
        size_t i = blockIdx.y * cols + c;
        float v = x[i] + bias[c];
        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
}
