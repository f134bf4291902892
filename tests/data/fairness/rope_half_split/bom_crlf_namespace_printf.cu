// Idiom: BOM + CRLF + tabs + unicode comments (θ_j = 10000^(−2j/d), “rotate_half”), a namespace with `using`, a printf once and cudaGetLastError in launchRope.
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdint>

namespace rope {
using idx = std::int64_t;
static __device__ __forceinline__ void rotate(float a, float b, float c, float s, float* lo, float* hi) {
	*lo = a * c - b * s;	// x₀·cos − x₁·sin
	*hi = a * s + b * c;	// x₀·sin + x₁·cos
}
}  // namespace rope

__global__ void ropeHalfSplit(const float* __restrict__ in, const float* __restrict__ cosTab, const float* __restrict__ sinTab,
			      float* __restrict__ out, size_t pairs, int halfDim, int heads, int seq) {
	const rope::idx p = static_cast<rope::idx>(blockIdx.x) * blockDim.x + threadIdx.x;
	if (p >= static_cast<rope::idx>(pairs)) return;
	const rope::idx row = p / halfDim, j = p % halfDim;
	const rope::idx pos = (row / heads) % seq;
	const rope::idx lo = row * 2 * halfDim + j;
	rope::rotate(in[lo], in[lo + halfDim], cosTab[pos * halfDim + j], sinTab[pos * halfDim + j], &out[lo], &out[lo + halfDim]);
}

void launchRope(const float* in, const float* cosTab, const float* sinTab, float* out, int batch, int seq, int heads,
		int headDim, cudaStream_t stream) {
	static int calls = 0;
	if (calls++ == 0) std::printf("launchRope: first call, headDim %d\n", headDim);
	const size_t pairs = static_cast<size_t>(batch) * seq * heads * (headDim / 2);
	ropeHalfSplit<<<(unsigned)((pairs + 255) / 256), 256, 0, stream>>>(in, cosTab, sinTab, out, pairs, headDim / 2, heads, seq);
	if (cudaGetLastError() != cudaSuccess) std::printf("launch failed\n");
}
