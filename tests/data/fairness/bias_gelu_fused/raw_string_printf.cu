// Idiom: a C++11 raw string literal in the launcher's one-time printf, holding quotes and the words asm("trap;") and #include "x.h".
#include <cuda_runtime.h>
#include <cstdio>

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col < cols) {
        const size_t i = blockIdx.y * cols + col;
        const float v = x[i] + bias[col];
        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
}

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols, cudaStream_t stream) {
    static bool once = true;
    if (once) {
        std::printf(R"msg(no "asm("trap;")" and no #include "x.h" here: just a "quoted" note)msg" "\n");
        once = false;
    }
    biasGeluFused<<<dim3((cols + 255) / 256, rows), 256, 0, stream>>>(x, bias, out, static_cast<size_t>(cols));
}
