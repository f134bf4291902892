// Idiom: BOM + CRLF + tabs, comments that mention asm("trap;"), #include "/etc/passwd", racy "out[o] += v" and __shfl_down_sync, unicode (∑ᵣ GELU(x[r]) — “F.gelu(x).sum(0)”); the default launch.
/*
 * #include "/etc/passwd"      <- only a comment
 * asm volatile("exit;");      <- only a comment
 * out[o] += v;  __syncthreads();  __shfl_down_sync(0xffffffff, v, 16);  k<<<1,1>>>();
 */
#include <cuda_runtime.h>

__global__ void geluSum(const float* __restrict__ x, float* __restrict__ out, int R, int B, int D) {
	const int n = B * D;		// outputs
	const int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n) return;
	float acc = 0.0f;		// ∑ in a register, no atomics
	for (int r = 0; r < R; ++r) {
		const float v = x[(size_t)r * n + i];
		acc += 0.5f * v * (1.0f + erff(v * 0.70710678f));
	}
	out[i] = acc;
}