// A student's file as it leaves their own machine: the kernel and launcher the exercise asks for,
// and the main() they tested it with (a stream of its own, pinned host memory, events, a check
// against a CPU reference). The grader calls the launcher, never main, and leaves main out.
#include <cuda_runtime.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CUDA_CHECK(call)                                                                        \
    do {                                                                                        \
        cudaError_t err_ = (call);                                                              \
        if (err_ != cudaSuccess) {                                                              \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(err_));       \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col < cols) {
        const size_t i = blockIdx.y * cols + col;
        const float v = x[i] + bias[col];
        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
}

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols,
                         cudaStream_t stream) {
    const dim3 grid((cols + 255) / 256, rows);
    biasGeluFused<<<grid, 256, 0, stream>>>(x, bias, out, cols);
    CUDA_CHECK(cudaGetLastError());
}

int main() {
    const int rows = 101, cols = 97;
    const size_t n = static_cast<size_t>(rows) * cols;
    float *x, *bias, *out, *host;
    CUDA_CHECK(cudaMalloc(&x, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&bias, cols * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&out, n * sizeof(float)));
    CUDA_CHECK(cudaMallocHost(&host, n * sizeof(float)));
    std::vector<float> hx(n), hb(cols);
    for (size_t i = 0; i < n; ++i) hx[i] = std::sin(0.01f * i);
    for (int c = 0; c < cols; ++c) hb[c] = 0.1f * c - 4.0f;
    CUDA_CHECK(cudaMemcpy(x, hx.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(bias, hb.data(), cols * sizeof(float), cudaMemcpyHostToDevice));

    cudaStream_t stream;
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaStreamCreate(&stream));
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    CUDA_CHECK(cudaEventRecord(start, stream));
    launchBiasGeluFused(x, bias, out, rows, cols, stream);
    CUDA_CHECK(cudaEventRecord(stop, stream));
    CUDA_CHECK(cudaMemcpyAsync(host, out, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));

    double worst = 0.0;
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c) {
            const double v = static_cast<double>(hx[r * cols + c]) + hb[c];
            const double want = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
            worst = std::fmax(worst, std::fabs(want - host[r * cols + c]));
        }
    printf("max abs error %.3g, %.3f ms\n", worst, ms);
    cudaStreamDestroy(stream);
    cudaFreeHost(host);
    cudaFree(x);
    cudaFree(bias);
    cudaFree(out);
    return worst < 1e-5 ? 0 : 1;
}
