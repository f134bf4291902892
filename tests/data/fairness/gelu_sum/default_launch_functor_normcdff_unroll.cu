// Idiom: the default launch (no launcher), a functor struct for GELU written as v * normcdff(v), a #pragma unroll 4 loop over r with a const pointer walk.
#include <cuda_runtime.h>

struct GeluExact {
    __device__ float operator()(float v) const { return v * normcdff(v); }
};

__global__ void geluSum(const float* __restrict__ x, float* __restrict__ out, int R, int B, int D) {
    const int n = B * D;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const GeluExact g;
    const float* p = x + i;
    float acc = 0.0f;
#pragma unroll 4
    for (int r = 0; r < R; ++r, p += n) acc += g(*p);
    out[i] = acc;
}
