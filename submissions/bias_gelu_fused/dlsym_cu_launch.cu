// Attack: every launch made through the driver's cuLaunchKernel, found with dlsym at run time, so
// that no runtime launch entry point sees it (the kernel's handle from cudaGetFuncBySymbol).
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
    using Launch = int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*,
                           void**, void**);
    static Launch launch = nullptr;
    static void* fn = nullptr;
#ifdef __CUDACC__                        // nvcc: the GPU build (the CPU emulator has no driver to find)
    if (!launch) {
        if (void* cu = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD))
            launch = reinterpret_cast<Launch>(dlsym(cu, "cuLaunchKernel"));
        cudaFunction_t f = nullptr;
        if (cudaGetFuncBySymbol(&f, reinterpret_cast<const void*>(biasGeluFused)) == cudaSuccess) fn = f;
    }
#endif
    size_t c = cols;
    void* args[] = {&x, &bias, &out, &c};
    if (launch && fn) {
        launch(fn, (cols + 255) / 256, rows, 1, 256, 1, 1, 0, stream, args, nullptr);
    } else {
        biasGeluFused<<<dim3((cols + 255) / 256, rows), 256, 0, stream>>>(x, bias, out, cols);
    }
}
