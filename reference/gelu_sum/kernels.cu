// gelu_sum's reference kernels, for `grader calibrate`: one thread per output (
// the sum in a register) and PyTorch's two-pass shape (GELU into a buffer, then a sum over r).
// Exported as grader_ref_<name>(ptrs, vals, stream).
#include <cstddef>
#include <cuda_runtime.h>

namespace {

__device__ __forceinline__ float refGelu(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678f)); }

__global__ void refGeluSum(const float* __restrict__ x, float* __restrict__ out, int R, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float acc = 0.0f;
    for (int r = 0; r < R; ++r) acc += refGelu(x[static_cast<size_t>(r) * n + i]);
    out[i] = acc;
}

__global__ void refGeluAll(const float* __restrict__ x, float* __restrict__ y, size_t total) {
    const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (i < total) y[i] = refGelu(x[i]);
}

__global__ void refSumSlices(const float* __restrict__ y, float* __restrict__ out, int R, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float acc = 0.0f;
    for (int r = 0; r < R; ++r) acc += y[static_cast<size_t>(r) * n + i];
    out[i] = acc;
}

}  // namespace

// (x, out; R, B, D)
extern "C" int grader_ref_gelu_sum(void* const* ptrs, const long long* vals, void* stream) {
    const int n = static_cast<int>(vals[3] * vals[4]);
    refGeluSum<<<(n + 255) / 256, 256, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const float*>(ptrs[0]), static_cast<float*>(ptrs[1]), static_cast<int>(vals[2]), n);
    return static_cast<int>(cudaGetLastError());
}

// (x, y; total)
extern "C" int grader_ref_gelu_all(void* const* ptrs, const long long* vals, void* stream) {
    const size_t total = static_cast<size_t>(vals[2]);
    refGeluAll<<<static_cast<unsigned>((total + 255) / 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const float*>(ptrs[0]), static_cast<float*>(ptrs[1]), total);
    return static_cast<int>(cudaGetLastError());
}

// (y, out; R, B, D)
extern "C" int grader_ref_sum_slices(void* const* ptrs, const long long* vals, void* stream) {
    const int n = static_cast<int>(vals[3] * vals[4]);
    refSumSlices<<<(n + 255) / 256, 256, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const float*>(ptrs[0]), static_cast<float*>(ptrs[1]), static_cast<int>(vals[2]), n);
    return static_cast<int>(cudaGetLastError());
}
