// Attack: every launch through the CUDA runtime's own cudaLaunchKernel, found at run time with
// dlsym(RTLD_DEFAULT) rather than called by name (a launch the link's wrapping never sees).
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
    using Launch = cudaError_t (*)(const void*, dim3, dim3, void**, size_t, cudaStream_t);
    static Launch launch = reinterpret_cast<Launch>(dlsym(RTLD_DEFAULT, "cudaLaunchKernel"));
    size_t n = static_cast<size_t>(cols);
    void* args[] = {&x, &bias, &out, &n};
    const dim3 grid((cols + 255) / 256, rows);
    if (launch) launch(reinterpret_cast<const void*>(&biasGeluFused), grid, dim3(256), args, 0, stream);
    else biasGeluFused<<<grid, 256, 0, stream>>>(x, bias, out, n);
}
