// Attack: as driver_stream_split.cu, with a blocking stream (flags 0) and a fifth of the rows.
#include <dlfcn.h>
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
    static cudaStream_t side = nullptr;
    if (!side) {
        void* cu = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        auto create = cu ? reinterpret_cast<int (*)(void**, unsigned)>(dlsym(cu, "cuStreamCreate")) : nullptr;
        void* s = nullptr;
        if (create && create(&s, 0) == 0) side = static_cast<cudaStream_t>(s);
    }
    const int head = side ? rows * 80 / 100 : rows;
    biasGeluFused<<<dim3((cols + 255) / 256, head), 256, 0, stream>>>(x, bias, out, cols);
    if (head < rows) {
        const size_t skip = static_cast<size_t>(head) * cols;
        biasGeluFused<<<dim3((cols + 255) / 256, rows - head), 256, 0, side>>>(x + skip, bias, out + skip, cols);
    }
}
