// Idiom: a kernel templated on the element type with an explicit instantiation for float, graded by the default launch (no launcher): the launch deduces T = float.
#include <cuda_runtime.h>

template <typename T>
__global__ void biasGeluFused(const T* __restrict__ x, const T* __restrict__ bias, T* __restrict__ out, size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col < cols) {
        const size_t i = blockIdx.y * cols + col;
        const T v = x[i] + bias[col];
        out[i] = T(0.5) * v * (T(1) + erff(v * T(0.70710678)));
    }
}

template __global__ void biasGeluFused<float>(const float* __restrict__, const float* __restrict__, float* __restrict__, size_t);
