// Idiom: digraphs (<: :> <% %>) in correct code, a multi-line macro with line splices, and no newline at the end of the file.
#include <cuda_runtime.h>

#define GELU_ERF(v)                                   \
    (0.5f * (v) *                                     \
     (1.0f + erff((v) * 0.70710678f)))

__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,
                              float* __restrict__ out, size_t cols) <%
    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (col < cols) <%
        const size_t i = blockIdx.y * cols + col;
        const float v = x<:i:> + bias<:col:>;
        out<:i:> = GELU_ERF(v);
    %>
%>