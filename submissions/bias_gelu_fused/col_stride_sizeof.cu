// Bug: the column scaled by sizeof(float) as if the index counted bytes. The column is guarded
// against cols, but columns land four elements apart: the last rows read past x and write past out.
#include <cuda_runtime.h>

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) {
    size_t row = blockIdx.y;
    size_t col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col < cols) {
        size_t i = row * cols + col * sizeof(float);
        float v = x[i] + bias[col];
        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
}
