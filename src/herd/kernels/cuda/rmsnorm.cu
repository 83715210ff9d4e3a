// RMSNorm on the GPU (kernels/rmsnorm.h): fp32 statistics, the CPU kernel's expressions.
//
// Forward: one block per row (a grid-stride loop over rows past the grid limit), the block's threads
// striding over the row: the sum of squares by a block reduction, rstd = 1 / sqrt(ss / dim + eps) in
// double as on the CPU, then y = x * rstd * w.
//
// Backward, deterministic: pass 1 gives each of G = min(n, 256) blocks a contiguous range of rows; per
// row a block reduction gives c = sum w dy x, the block writes (or adds into) dx, and each thread adds
// dy x rstd of its own columns into the block's slice of a (G, dim) partial buffer (a thread always
// owns the same columns, so no races and no atomics). Pass 2, one thread per column, adds the G
// partials into dw in block order. The summation order depends only on n and dim, not on timing.
#include <algorithm>

#include "herd/kernels/cuda/common.cuh"
#include "herd/kernels/cuda/kernels.h"

namespace herd::kernels::cuda {
namespace {

constexpr std::int64_t kMaxRowBlocks = 65535LL * 32;
constexpr std::int64_t kMaxPartials = 256;  // row groups of the backward's dw partials

// Threads per row: enough for about 8 elements each, a multiple of 32 in [32, 1024].
int row_threads(std::int64_t dim) {
  int t = 32;
  while (t < 1024 && static_cast<std::int64_t>(t) * 8 < dim) t *= 2;
  return t;
}

__global__ void rmsnorm_forward_kernel(const float* x, std::int64_t ldx, const float* w, std::int64_t n,
                                       std::int64_t dim, double eps, float* y, std::int64_t ldy, float* rstd) {
  __shared__ float scratch[32];
  for (std::int64_t row = blockIdx.x; row < n; row += gridDim.x) {
    const float* xi = x + row * ldx;
    float ss = 0.0f;
    for (std::int64_t j = threadIdx.x; j < dim; j += blockDim.x) ss += xi[j] * xi[j];
    ss = block_sum(ss, scratch);
    const float r = static_cast<float>(1.0 / sqrt(static_cast<double>(ss) / static_cast<double>(dim) + eps));
    if (threadIdx.x == 0) rstd[row] = r;
    float* yi = y + row * ldy;
    for (std::int64_t j = threadIdx.x; j < dim; j += blockDim.x) yi[j] = xi[j] * r * w[j];
  }
}

// Pass 1 of the backward: block b takes rows [begin_b, end_b) (near-equal contiguous ranges).
__global__ void rmsnorm_backward_rows_kernel(const float* dy, std::int64_t lddy, const float* x, std::int64_t ldx,
                                             const float* w, const float* rstd, std::int64_t n, std::int64_t dim,
                                             float* dx, std::int64_t lddx, bool add, float* partial) {
  __shared__ float scratch[32];
  const std::int64_t parts = gridDim.x, b = blockIdx.x;
  const std::int64_t base = n / parts, extra = n % parts;
  const std::int64_t begin = b * base + (b < extra ? b : extra);
  const std::int64_t end = begin + base + (b < extra ? 1 : 0);
  float* pw = partial + b * dim;
  for (std::int64_t j = threadIdx.x; j < dim; j += blockDim.x) pw[j] = 0.0f;
  const float inv_dim = 1.0f / static_cast<float>(dim);
  for (std::int64_t i = begin; i < end; ++i) {
    const float* dyi = dy + i * lddy;
    const float* xi = x + i * ldx;
    float* dxi = dx + i * lddx;
    const float r = rstd[i];
    float c = 0.0f;
    for (std::int64_t j = threadIdx.x; j < dim; j += blockDim.x) c += w[j] * dyi[j] * xi[j];
    c = block_sum(c, scratch);
    c *= inv_dim * r * r;
    for (std::int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
      const float d = dyi[j], xv = xi[j];
      const float g = r * (w[j] * d - xv * c);
      dxi[j] = add ? dxi[j] + g : g;
      pw[j] += d * xv * r;
    }
  }
}

// Pass 2: dw[j] += sum over the row groups, in group order.
__global__ void rmsnorm_backward_dw_kernel(const float* partial, std::int64_t parts, std::int64_t dim, float* dw) {
  for (std::int64_t j = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; j < dim;
       j += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float s = 0.0f;
    for (std::int64_t b = 0; b < parts; ++b) s += partial[b * dim + j];
    dw[j] += s;
  }
}

}  // namespace

void rmsnorm_forward(const float* x, std::int64_t ldx, const float* w, std::int64_t n, std::int64_t dim, double eps,
                     float* y, std::int64_t ldy, float* rstd) {
  if (n <= 0) return;
  const int threads = row_threads(dim);
  const auto blocks = static_cast<unsigned>(std::min(n, kMaxRowBlocks));
  rmsnorm_forward_kernel<<<blocks, threads, 0, stream()>>>(x, ldx, w, n, dim, eps, y, ldy, rstd);
  HERD_CUDA_LAUNCHED("rmsnorm_forward");
}

void rmsnorm_backward(const float* dy, std::int64_t lddy, const float* x, std::int64_t ldx, const float* w,
                      const float* rstd, std::int64_t n, std::int64_t dim, float* dx, std::int64_t lddx, Accumulate acc,
                      float* dw) {
  if (n <= 0 || dim <= 0) return;
  const std::int64_t parts = std::min(n, kMaxPartials);
  // Freed into the caching allocator once both passes are enqueued: a later allocation on this
  // stream runs after them.
  DeviceBuffer<float> partial(parts * dim);
  const int threads = row_threads(dim);
  rmsnorm_backward_rows_kernel<<<static_cast<unsigned>(parts), threads, 0, stream()>>>(
      dy, lddy, x, ldx, w, rstd, n, dim, dx, lddx, acc == Accumulate::kAdd, partial.data());
  HERD_CUDA_LAUNCHED("rmsnorm_backward rows");
  constexpr int kThreads = 256;
  rmsnorm_backward_dw_kernel<<<grid_for(dim, kThreads), kThreads, 0, stream()>>>(partial.data(), parts, dim, dw);
  HERD_CUDA_LAUNCHED("rmsnorm_backward dw");
}

}  // namespace herd::kernels::cuda
