// ATTACK: compute once, then serve later calls by copying the previous call's output into this
// one's (cudaMemcpyAsync device to device). The previous output is another call's buffer: the
// replay refuses the copy's source, which lies in none of this call's buffers.
#include <cuda_runtime.h>

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias, float* __restrict__ out,
                              size_t cols) {
    const size_t c = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (c >= cols) return;
    const size_t i = blockIdx.y * cols + c;
    const float v = x[i] + bias[c];
    out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
}

static float* g_last = nullptr;
static size_t g_last_bytes = 0;

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols, cudaStream_t stream) {
    const size_t bytes = static_cast<size_t>(rows) * cols * sizeof(float);
    if (g_last && g_last_bytes == bytes) {
        cudaMemcpyAsync(out, g_last, bytes, cudaMemcpyDeviceToDevice, stream);
        return;
    }
    biasGeluFused<<<dim3((cols + 255) / 256, rows), 256, 0, stream>>>(x, bias, out, cols);
    g_last = out;
    g_last_bytes = bytes;
}
