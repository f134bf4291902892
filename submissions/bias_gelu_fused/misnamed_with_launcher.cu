// A correct launcher and kernel, but the kernel is called bias_gelu_kernel: this exercise asks
// for biasGeluFused by name (its rubric's kernel.name_required), so the refusal says that.
#include <cuda_runtime.h>

__global__ void bias_gelu_kernel(const float* __restrict__ x, const float* __restrict__ bias, float* __restrict__ out,
                                 int rows, int cols) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int r = blockIdx.y;
    if (c >= cols || r >= rows) return;
    const float v = x[static_cast<size_t>(r) * cols + c] + bias[c];
    out[static_cast<size_t>(r) * cols + c] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
}

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols, cudaStream_t stream) {
    bias_gelu_kernel<<<dim3((cols + 255) / 256, rows), 256, 0, stream>>>(x, bias, out, rows, cols);
}
