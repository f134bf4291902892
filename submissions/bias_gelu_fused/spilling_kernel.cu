// Correct, but each thread builds a 256-entry permutation table in a local array and reads it at
// an index known only at run time, so the compiler must place the table in local memory (as
// slow as global memory). The value read changes nothing (0.0f times it is zero).
__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col < cols) {
        const size_t i = blockIdx.y * cols + col;
        int perm[256];
        const int seed = __float_as_int(x[i]);
        for (int k = 0; k < 256; ++k) perm[k] = (k * 5 + seed) & 255;
        const int j = perm[perm[seed & 255]];
        const float v = x[i] + bias[col];
        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f)) + 0.0f * static_cast<float>(j);
    }
}
