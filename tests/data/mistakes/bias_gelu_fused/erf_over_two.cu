// Grid-stride loop over all rows*cols elements, own launcher.
#include <cuda_runtime.h>

__global__ void biasGeluFused(const float* x, const float* bias, float* out, int n, int cols) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        float v = x[i] + bias[i % cols];
        out[i] = 0.5f * v * (1.0f + erff(v / 2.0f));
    }
}

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols,
                         cudaStream_t stream) {
    int n = rows * cols;
    int threads = 256;
    int blocks = (n + threads - 1) / threads;
    if (blocks > 1024) blocks = 1024;
    biasGeluFused<<<blocks, threads, 0, stream>>>(x, bias, out, n, cols);
}
