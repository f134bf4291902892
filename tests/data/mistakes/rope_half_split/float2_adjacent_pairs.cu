// Pairs loaded as float2 (one 8-byte load per pair), own launcher.
#include <cuda_runtime.h>

__global__ void ropeFloat2(const float2* __restrict__ in2, const float* __restrict__ cosTab,
                           const float* __restrict__ sinTab, float2* __restrict__ out2,
                           int total, int half, int heads, int seq) {
    int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= total) return;
    int j = p % half;
    int row = p / half;
    int pos = (row / heads) % seq;
    float c = cosTab[pos * half + j];
    float s = sinTab[pos * half + j];
    float2 v = in2[p];
    float2 r;
    r.x = v.x * c - v.y * s;
    r.y = v.x * s + v.y * c;
    out2[p] = r;
}

void launchRope(const float* in, const float* cosTab, const float* sinTab, float* out, int batch,
                int seq, int heads, int headDim, cudaStream_t stream) {
    int half = headDim / 2;
    int total = batch * seq * heads * half;
    ropeFloat2<<<(total + 255) / 256, 256, 0, stream>>>((const float2*)in, cosTab, sinTab,
                                                        (float2*)out, total, half, heads, seq);
}
