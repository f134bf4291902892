// A grid-stride loop under the default launch, int parameters where the signature has size_t,
// no __restrict__, and the rotation in a lambda.
__global__ void ropeHalfSplit(const float* in, const float* cosTab, const float* sinTab, float* out, long pairs,
                              int halfDim, int heads, int seq) {
    auto rotate = [](float a, float b, float c, float s) { return make_float2(a * c - b * s, a * s + b * c); };
    for (long p = blockIdx.x * (long)blockDim.x + threadIdx.x; p < pairs; p += (long)gridDim.x * blockDim.x) {
        const long row = p / halfDim;
        const int j = (int)(p - row * halfDim);
        const int pos = (int)((row / heads) % seq);
        const long lo = row * 2 * halfDim + j;
        const float2 r = rotate(in[lo], in[lo + halfDim], cosTab[pos * halfDim + j], sinTab[pos * halfDim + j]);
        out[lo] = r.x;
        out[lo + halfDim] = r.y;
    }
}
