// Idiom: cudaLaunchKernel with an argument array and the (const void*) cast, and the last rows
// through cudaLaunchKernel's C++ template form.
#include <cuda_runtime.h>

__device__ __forceinline__ float geluErf(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678f)); }

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col < cols) {
        const size_t i = blockIdx.y * cols + col;
        out[i] = geluErf(x[i] + bias[col]);
    }
}

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols,
                         cudaStream_t stream) {
    size_t c = cols;
    const int head = rows > 1 ? rows - 1 : rows;
    void* args[] = {(void*)&x, (void*)&bias, (void*)&out, (void*)&c};
    cudaLaunchKernel((const void*)biasGeluFused, dim3((cols + 255) / 256, head), dim3(256), args, 0, stream);
    if (head < rows) {
        const float* x2 = x + static_cast<size_t>(head) * cols;
        float* out2 = out + static_cast<size_t>(head) * cols;
        void* rest[] = {&x2, &bias, &out2, &c};
        cudaLaunchKernel(biasGeluFused, dim3((cols + 255) / 256, 1), dim3(256), rest, 0, stream);
    }
}
