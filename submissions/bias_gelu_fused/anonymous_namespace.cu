// Helpers and the working kernel in an anonymous namespace; a launcher picks the grid.
namespace {

constexpr int kThreads = 128;

__device__ __noinline__ float gelu(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678f)); }

__global__ void rowKernel(const float* x, const float* bias, float* out, int cols) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col < cols) {
        const size_t i = static_cast<size_t>(blockIdx.y) * cols + col;
        out[i] = gelu(x[i] + bias[col]);
    }
}

}  // namespace

__global__ void biasGeluFused(const float* x, const float* bias, float* out, size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col < cols) {
        const size_t i = blockIdx.y * cols + col;
        out[i] = gelu(x[i] + bias[col]);
    }
}

void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols,
                         cudaStream_t stream) {
    const dim3 grid((cols + kThreads - 1) / kThreads, rows);
    rowKernel<<<grid, kThreads, 0, stream>>>(x, bias, out, cols);
}
