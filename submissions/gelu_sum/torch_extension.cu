// A load_inline extension's CUDA source pasted whole: torch/extension.h, a torch::Tensor
// wrapper with TORCH_CHECK, and a launcher added for the grader. The grader compiles plain
// CUDA: the include is answered by name, with what to keep and what to drop.
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void gelu_sum_kernel(const float* __restrict__ x, float* __restrict__ out, int R, int B, int D) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= B * D) return;
    float acc = 0.0f;
    for (int r = 0; r < R; ++r) {
        float v = x[r * B * D + i];
        acc += 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
    out[i] = acc;
}

torch::Tensor gelu_sum_forward(torch::Tensor x) {
    TORCH_CHECK(x.dim() == 3, "x must be 3D");
    auto out = torch::empty({x.size(1), x.size(2)}, x.options());
    int R = x.size(0), B = x.size(1), D = x.size(2);
    gelu_sum_kernel<<<(B * D + 255) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), R, B, D);
    return out;
}

void launchGeluSum(const float* x, float* out, int R, int B, int D, cudaStream_t stream) {
    gelu_sum_kernel<<<(B * D + 255) / 256, 256, 0, stream>>>(x, out, R, B, D);
}
