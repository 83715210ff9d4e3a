// Token embedding on the GPU (kernels/embedding.h), for this rank's vocab shard of the table, rows
// [vocab_begin, vocab_begin + rows).
//
// Forward: out (n, dim) = the token's table row (a bf16 table widened exactly to fp32), or zeros
// when the id is outside the shard. Backward: dtable[id - vocab_begin] += dout for ids in the shard,
// with fp32 atomicAdd (repeated ids in a batch race otherwise), so the order of a row's sums may vary
// run to run; ids outside the shard are skipped.
//
// Launch (both): one block per token (a grid-stride loop over tokens past the grid limit), the block's
// 256 threads striding over dim.
#include <algorithm>

#include "herd/kernels/cuda/common.cuh"
#include "herd/kernels/cuda/kernels.h"

namespace herd::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kMaxTokenBlocks = 65535LL * 32;

unsigned token_blocks(std::int64_t n) { return static_cast<unsigned>(std::min(n, kMaxTokenBlocks)); }

template <typename T>
__global__ void embedding_forward_kernel(const std::int32_t* ids, std::int64_t n, const T* table,
                                         std::int64_t vocab_begin, std::int64_t rows, std::int64_t dim, float* out) {
  for (std::int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const std::int64_t r = static_cast<std::int64_t>(ids[i]) - vocab_begin;
    float* o = out + i * dim;
    if (r >= 0 && r < rows) {
      const T* t = table + r * dim;
      for (std::int64_t j = threadIdx.x; j < dim; j += blockDim.x) o[j] = widen(t[j]);
    } else {
      for (std::int64_t j = threadIdx.x; j < dim; j += blockDim.x) o[j] = 0.0f;
    }
  }
}

__global__ void embedding_backward_kernel(const std::int32_t* ids, std::int64_t n, const float* dout,
                                          std::int64_t vocab_begin, std::int64_t rows, std::int64_t dim,
                                          float* dtable) {
  for (std::int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const std::int64_t r = static_cast<std::int64_t>(ids[i]) - vocab_begin;
    if (r < 0 || r >= rows) continue;
    float* d = dtable + r * dim;
    const float* g = dout + i * dim;
    for (std::int64_t j = threadIdx.x; j < dim; j += blockDim.x) atomicAdd(d + j, g[j]);
  }
}

}  // namespace

void embedding_forward(const std::int32_t* ids, std::int64_t n, const float* table, std::int64_t vocab_begin,
                       std::int64_t rows, std::int64_t dim, float* out) {
  if (n <= 0 || dim <= 0) return;
  embedding_forward_kernel<<<token_blocks(n), kThreads, 0, stream()>>>(ids, n, table, vocab_begin, rows, dim, out);
  HERD_CUDA_LAUNCHED("embedding_forward");
}

void embedding_forward(const std::int32_t* ids, std::int64_t n, const bf16* table, std::int64_t vocab_begin,
                       std::int64_t rows, std::int64_t dim, float* out) {
  if (n <= 0 || dim <= 0) return;
  embedding_forward_kernel<<<token_blocks(n), kThreads, 0, stream()>>>(ids, n, dev(table), vocab_begin, rows, dim, out);
  HERD_CUDA_LAUNCHED("embedding_forward bf16");
}

void embedding_backward(const std::int32_t* ids, std::int64_t n, const float* dout, std::int64_t vocab_begin,
                        std::int64_t rows, std::int64_t dim, float* dtable) {
  if (n <= 0 || dim <= 0) return;
  embedding_backward_kernel<<<token_blocks(n), kThreads, 0, stream()>>>(ids, n, dout, vocab_begin, rows, dim, dtable);
  HERD_CUDA_LAUNCHED("embedding_backward");
}

}  // namespace herd::kernels::cuda
