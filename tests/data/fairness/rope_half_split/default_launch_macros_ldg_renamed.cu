// Idiom: the default launch with parameter names of its own (x, c, s, y, n, hd2, nh, T), index macros, __ldg, unsigned long long indices.
#include <cuda_runtime.h>

#define IN_LO(row, j)  ((row) * 2ull * hd2 + (j))
#define TAB(pos, j)    ((pos) * (unsigned long long)hd2 + (j))

__global__ void ropeHalfSplit(const float* x, const float* c, const float* s, float* y, size_t n, int hd2, int nh, int T) {
    const unsigned long long p = blockIdx.x * 1ull * blockDim.x + threadIdx.x;
    if (p >= n) return;
    const unsigned long long row = p / hd2, j = p % hd2;
    const unsigned long long pos = (row / nh) % T;
    const float cc = __ldg(c + TAB(pos, j)), ss = __ldg(s + TAB(pos, j));
    const float a = __ldg(x + IN_LO(row, j)), b = __ldg(x + IN_LO(row, j) + hd2);
    y[IN_LO(row, j)] = a * cc - b * ss;
    y[IN_LO(row, j) + hd2] = fmaf(a, ss, b * cc);
}
