// Idiom: comments and strings that mention what the screen looks for: #include "/etc/passwd", asm("trap;"), <<<...>>>, __syncthreads, cudaMemcpyDeviceToHost, a printf from the launcher once.
/* Not code:
   #include "/etc/passwd"
   asm volatile("trap;");
   otherKernel<<<1, 1>>>(nullptr);   // dynamic parallelism? no, a comment
   cudaMemcpy(host, out, n, cudaMemcpyDeviceToHost); cudaStreamCreate(&s); __syncthreads();
*/
#include <cuda_runtime.h>
#include <cstdio>

// A string literal with "asm" and "#include" inside it, and an escaped quote: \" // /* not a comment */
static const char* kBanner = "biasGeluFused: asm(\"trap;\") and #include \"/etc/passwd\" are only words here /* */ //";

__device__ __forceinline__ float geluErf(float v) {
    // erff, not tanh: "tanhf(0.79788456f * (v + 0.044715f * v * v * v))" is the approximation
    return 0.5f * v * (1.0f + erff(v * 0.70710678f));
}

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;  // '"' is a char
    const char quote = '"';  (void)quote;
    if (col < cols) {
        const size_t i = blockIdx.y * cols + col;
        out[i] = geluErf(x[i] + bias[col]);
    }
}

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols, cudaStream_t stream) {
    static bool said = false;
    if (!said) {
        std::printf("%s\n", kBanner);
        said = true;
    }
    dim3 grid((cols + 255) / 256, rows);
    biasGeluFused<<<grid, 256, 0, stream>>>(x, bias, out, static_cast<size_t>(cols));
}
