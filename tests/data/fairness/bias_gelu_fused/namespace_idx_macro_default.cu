// Idiom: __forceinline__ device helpers in a namespace, an IDX(r,c) macro for indexing, M_SQRT1_2 from <cmath>; the default launch (no launcher).
#include <cuda_runtime.h>
#include <cmath>

#define IDX(r, c) ((r) * cols + (c))

namespace gelu_detail {
__device__ __forceinline__ float gelu_exact(float v) {
    return 0.5f * v * (1.0f + erff(v * static_cast<float>(M_SQRT1_2)));
}
}  // namespace gelu_detail

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) {
    const size_t c = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const size_t r = blockIdx.y;
    if (c < cols) out[IDX(r, c)] = gelu_detail::gelu_exact(x[IDX(r, c)] + bias[c]);
}
