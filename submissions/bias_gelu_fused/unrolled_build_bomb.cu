// Attack (resources): four loops of 5000 iterations, each fully unrolled, which keep nvcc's
// optimiser and assembler busy for a long time (about 10 s a loop on a 2-core machine). The
// build's time limit (limits.build_time_s) ends it as a compile_error that says where the
// compiler was.
#define BOMB(c)                                        \
    _Pragma("unroll 5000")                             \
    for (int k = 0; k < 5000; ++k) {                   \
        acc = acc * (c) + __sinf(v + k);               \
    }

__global__ void biasGeluFused(const float* x, const float* bias, float* out, size_t cols) {
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col < cols) {
        const size_t i = blockIdx.y * cols + col;
        float v = x[i] + bias[col];
        float acc = 0.0f;
        BOMB(0.999f) BOMB(0.998f) BOMB(0.997f) BOMB(0.996f)
        v += acc * 0.0f;
        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
}
