// bf16 buffer conversions on the GPU (kernels/convert.h): round to nearest even, NaN kept.
#include "herd/kernels/cuda/common.cuh"
#include "herd/kernels/cuda/kernels.h"

namespace herd::kernels::cuda {
namespace {

__global__ void to_bf16_kernel(const float* x, std::int64_t n, __nv_bfloat16* out) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    out[i] = narrow_bf16(x[i]);
  }
}

__global__ void to_float_kernel(const __nv_bfloat16* x, std::int64_t n, float* out) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    out[i] = widen(x[i]);
  }
}

__global__ void round_kernel(float* x, std::int64_t n, __nv_bfloat16* out) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const __nv_bfloat16 h = narrow_bf16(x[i]);
    if (out) out[i] = h;
    x[i] = widen(h);
  }
}

constexpr int kThreads = 256;

}  // namespace

void to_bf16(const float* x, std::int64_t n, bf16* out) {
  if (n <= 0) return;
  to_bf16_kernel<<<grid_for(n, kThreads), kThreads, 0, stream()>>>(x, n, dev(out));
  HERD_CUDA_LAUNCHED("to_bf16");
}

void to_float(const bf16* x, std::int64_t n, float* out) {
  if (n <= 0) return;
  to_float_kernel<<<grid_for(n, kThreads), kThreads, 0, stream()>>>(dev(x), n, out);
  HERD_CUDA_LAUNCHED("to_float");
}

void round_to_bf16(float* x, std::int64_t n, bf16* out) {
  if (n <= 0) return;
  round_kernel<<<grid_for(n, kThreads), kThreads, 0, stream()>>>(x, n, dev(out));
  HERD_CUDA_LAUNCHED("round_to_bf16");
}

}  // namespace herd::kernels::cuda
