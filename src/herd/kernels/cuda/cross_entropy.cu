// Vocabulary-tiled cross-entropy fused with the output projection on the GPU (contracts:
// kernels/cross_entropy.h; the CPU reference: kernels/cpu/cross_entropy.cpp, whose tile order and
// formulas this follows). Per (row tile, vocab tile), rows outer: the logits tile h_tile w_tile^T
// (rn, vn) comes from gemm / gemm_bf16 (fp32 output) into the workspace, then
//   ce_shard_stats     a stats kernel folds it into the running row max / sum of exp(logit - max) and
//                      picks up the target's logit when the target lies in the tile;
//   ce_shard_backward  a grad kernel turns it into G = (softmax - onehot(target)) * scale (zero rows for
//                      ignored targets; bf16: G rounded to bf16 into a second buffer), then
//                      dh += G w_tile and dw += G^T h_tile by gemm with beta = 1 (dh and dw accumulate,
//                      as on the CPU; the statistics and lse are overwritten).
//   ce_combine_stats   one thread per row combines the shards' stats in fp64 as the CPU does, writes lse,
//                      and per-block fp64 partial sums of the loss and count go to the host, which adds
//                      them in block order (deterministic); it synchronises the stream.
// Launch geometry: stats and grad kernels one block of 256 threads per row of the tile (grid rn),
// striding over the tile's vn logits; combine grid-stride over rows, at most 1024 blocks of 256.
// Shared memory: 32 floats (doubles in combine) of reduction scratch per block. The workspace (rows x
// vocab fp32 logits) is the caller's or, when null, a block from the caching allocator freed (into
// the cache, reused on this stream only, so after the enqueued kernels) on return.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "herd/core/check.h"
#include "herd/kernels/cuda/common.cuh"
#include "herd/kernels/cuda/kernels.h"

// Every GEMM call below names cuda:: explicitly: Trans lives in herd::kernels, so an unqualified call
// would also find the CPU gemm_bf16 by argument-dependent lookup.

namespace herd::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxCombineBlocks = 1024;

__global__ void init_stats_kernel(std::int64_t n, float* row_max, float* row_sumexp, float* target_logit) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    row_max[i] = -INFINITY;
    row_sumexp[i] = 0.0f;
    target_logit[i] = 0.0f;
  }
}

// One block per row of the tile: logits (rn, vn) folded into the row's running statistics.
__global__ void __launch_bounds__(kThreads)
    update_stats_kernel(const float* __restrict__ logits, std::int64_t vn, std::int64_t tile_begin,
                        const std::int32_t* __restrict__ targets, float* __restrict__ row_max,
                        float* __restrict__ row_sumexp, float* __restrict__ target_logit) {
  __shared__ float scratch[32];
  const std::int64_t i = blockIdx.x;
  const float* li = logits + i * vn;
  float mx = -INFINITY;
  for (std::int64_t j = threadIdx.x; j < vn; j += kThreads) mx = fmaxf(mx, li[j]);
  mx = block_max(mx, scratch);
  const float old_max = row_max[i];
  const float mnew = fmaxf(old_max, mx);
  float sum = 0.0f;
  for (std::int64_t j = threadIdx.x; j < vn; j += kThreads) sum += expf(li[j] - mnew);
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) {
    const float old_sum = row_sumexp[i];
    const float prev = old_sum == 0.0f ? 0.0f : old_sum * expf(old_max - mnew);
    row_sumexp[i] = prev + sum;
    row_max[i] = mnew;
    const std::int32_t target = targets[i];
    const std::int64_t t = static_cast<std::int64_t>(target) - tile_begin;
    if (target != kIgnoreIndex && t >= 0 && t < vn) target_logit[i] = li[t];
  }
}

__device__ __forceinline__ void store_grad(float* g, float v) { *g = v; }
__device__ __forceinline__ void store_grad(__nv_bfloat16* g, float v) { *g = narrow_bf16(v); }

// One block per row of the tile: G = (exp(logit - lse) - onehot) * scale, computed in fp32 and stored
// as G (fp32, in place over the logits, or rounded to bf16 into g).
template <typename G>
__global__ void __launch_bounds__(kThreads)
    grad_kernel(const float* logits, std::int64_t vn, std::int64_t tile_begin, const std::int32_t* __restrict__ targets,
                const float* __restrict__ lse, float scale, G* g) {
  const std::int64_t i = blockIdx.x;
  const float* li = logits + i * vn;
  G* gi = g + i * vn;
  const std::int32_t target = targets[i];
  if (target == kIgnoreIndex) {
    for (std::int64_t j = threadIdx.x; j < vn; j += kThreads) store_grad(gi + j, 0.0f);
    return;
  }
  const float l = lse[i];
  const std::int64_t t = static_cast<std::int64_t>(target) - tile_begin;
  for (std::int64_t j = threadIdx.x; j < vn; j += kThreads) {
    float v = expf(li[j] - l) * scale;
    if (j == t) v -= scale;
    store_grad(gi + j, v);
  }
}

// One thread per row: the shards' statistics combined in fp64 (as the CPU: the max over shards, then
// sum_s sumexp_s exp(max_s - max) and the target logits summed), lse written, and per block the fp64
// sums of the loss, the real-token count and the count of negative non-ignored targets into
// partial[3 * block + {0, 1, 2}].
__global__ void __launch_bounds__(kThreads)
    combine_kernel(std::int64_t n, std::int64_t shards, const float* __restrict__ row_max,
                   const float* __restrict__ row_sumexp, const float* __restrict__ target_logit,
                   const std::int32_t* __restrict__ targets, float* __restrict__ lse, double* __restrict__ partial) {
  __shared__ double scratch[32];
  double loss = 0, count = 0, bad = 0;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float mx = -INFINITY;
    for (std::int64_t s = 0; s < shards; ++s) mx = fmaxf(mx, row_max[s * n + i]);
    double sum = 0, tl = 0;
    for (std::int64_t s = 0; s < shards; ++s) {
      sum += static_cast<double>(row_sumexp[s * n + i]) * exp(static_cast<double>(row_max[s * n + i] - mx));
      tl += static_cast<double>(target_logit[s * n + i]);
    }
    const double l = static_cast<double>(mx) + log(sum);
    lse[i] = static_cast<float>(l);
    const std::int32_t target = targets[i];
    if (target != kIgnoreIndex) {
      if (target < 0) bad += 1;
      loss += l - tl;
      count += 1;
    }
  }
  loss = block_sum(loss, scratch);
  count = block_sum(count, scratch);
  bad = block_sum(bad, scratch);
  if (threadIdx.x == 0) {
    partial[3 * blockIdx.x] = loss;
    partial[3 * blockIdx.x + 1] = count;
    partial[3 * blockIdx.x + 2] = bad;
  }
}

// The workspace of one call: the caller's, or a caching-allocator block of the largest tile used.
class Workspace {
 public:
  Workspace(float* given, const CrossEntropyTiles& tiles, std::int64_t n, std::int64_t shard) : ptr_(given) {
    HERD_CHECK(tiles.rows >= 1 && tiles.vocab >= 1, "cross-entropy tiles must be positive");
    if (!ptr_) {
      own_ = DeviceBuffer<float>(std::max<std::int64_t>(1, std::min(tiles.rows, n) * std::min(tiles.vocab, shard)));
      ptr_ = own_.data();
    }
  }
  float* data() const { return ptr_; }

 private:
  float* ptr_;
  DeviceBuffer<float> own_;
};

void logits_tile(const float* h, std::int64_t rn, std::int64_t vn, std::int64_t dim, const float* w, float* logits) {
  cuda::gemm(Trans::kNo, Trans::kYes, rn, vn, dim, 1.0f, h, dim, w, dim, 0.0f, logits, vn);
}
void logits_tile(const bf16* h, std::int64_t rn, std::int64_t vn, std::int64_t dim, const bf16* w, float* logits) {
  cuda::gemm_bf16(Trans::kNo, Trans::kYes, rn, vn, dim, 1.0f, h, dim, w, dim, 0.0f, logits, vn);
}

unsigned rows_grid(std::int64_t rn) {
  HERD_CHECK(rn <= 0x7fffffff, "cross-entropy row tile too large for one grid");
  return static_cast<unsigned>(rn);
}

template <typename In>
void shard_stats(const In* h, std::int64_t n, std::int64_t dim, const In* w, std::int64_t vocab_begin,
                 std::int64_t shard, const std::int32_t* targets, float* row_max, float* row_sumexp,
                 float* target_logit, const CrossEntropyTiles& tiles, float* workspace) {
  if (n <= 0) return;
  const Workspace ws(workspace, tiles, n, shard);
  init_stats_kernel<<<grid_for(n, kThreads), kThreads, 0, stream()>>>(n, row_max, row_sumexp, target_logit);
  HERD_CUDA_LAUNCHED("ce_shard_stats init");
  for (std::int64_t r0 = 0; r0 < n; r0 += tiles.rows) {
    const std::int64_t rn = std::min(tiles.rows, n - r0);
    for (std::int64_t v0 = 0; v0 < shard; v0 += tiles.vocab) {
      const std::int64_t vn = std::min(tiles.vocab, shard - v0);
      logits_tile(h + r0 * dim, rn, vn, dim, w + v0 * dim, ws.data());
      update_stats_kernel<<<rows_grid(rn), kThreads, 0, stream()>>>(ws.data(), vn, vocab_begin + v0, targets + r0,
                                                                    row_max + r0, row_sumexp + r0, target_logit + r0);
      HERD_CUDA_LAUNCHED("ce_shard_stats update");
    }
  }
}

void tile_backward(const float* g, std::int64_t rn, std::int64_t vn, std::int64_t dim, const float* h_rows,
                   const float* w_rows, float* dh_rows, float* dw_rows) {
  cuda::gemm(Trans::kNo, Trans::kNo, rn, dim, vn, 1.0f, g, vn, w_rows, dim, 1.0f, dh_rows, dim);   // dh += G w
  cuda::gemm(Trans::kYes, Trans::kNo, vn, dim, rn, 1.0f, g, vn, h_rows, dim, 1.0f, dw_rows, dim);  // dw += G^T h
}
void tile_backward(const bf16* g, std::int64_t rn, std::int64_t vn, std::int64_t dim, const bf16* h_rows,
                   const bf16* w_rows, float* dh_rows, float* dw_rows) {
  cuda::gemm_bf16(Trans::kNo, Trans::kNo, rn, dim, vn, 1.0f, g, vn, w_rows, dim, 1.0f, dh_rows, dim);   // dh += G w
  cuda::gemm_bf16(Trans::kYes, Trans::kNo, vn, dim, rn, 1.0f, g, vn, h_rows, dim, 1.0f, dw_rows, dim);  // dw += G^T h
}

void launch_grad(const float* logits, std::int64_t rn, std::int64_t vn, std::int64_t tile_begin,
                 const std::int32_t* targets, const float* lse, float scale, float* g) {
  grad_kernel<float><<<rows_grid(rn), kThreads, 0, stream()>>>(logits, vn, tile_begin, targets, lse, scale, g);
  HERD_CUDA_LAUNCHED("ce_shard_backward grad");
}
void launch_grad(const float* logits, std::int64_t rn, std::int64_t vn, std::int64_t tile_begin,
                 const std::int32_t* targets, const float* lse, float scale, bf16* g) {
  grad_kernel<__nv_bfloat16>
      <<<rows_grid(rn), kThreads, 0, stream()>>>(logits, vn, tile_begin, targets, lse, scale, dev(g));
  HERD_CUDA_LAUNCHED("ce_shard_backward grad");
}

// G's buffer: the logits tile itself (fp32, in place), or a bf16 tile from the caching allocator.
template <typename In>
struct GradTile;
template <>
struct GradTile<float> {
  GradTile(float* logits, std::int64_t) : ptr(logits) {}
  float* ptr;
};
template <>
struct GradTile<bf16> {
  GradTile(float*, std::int64_t elems) : buf(std::max<std::int64_t>(1, elems)), ptr(buf.data()) {}
  DeviceBuffer<bf16> buf;
  bf16* ptr;
};

template <typename In>
void shard_backward(const In* h, std::int64_t n, std::int64_t dim, const In* w, std::int64_t vocab_begin,
                    std::int64_t shard, const std::int32_t* targets, const float* lse, float scale, float* dh,
                    float* dw, const CrossEntropyTiles& tiles, float* workspace) {
  if (n <= 0 || shard <= 0) return;
  const Workspace ws(workspace, tiles, n, shard);
  const GradTile<In> g(ws.data(), std::min(tiles.rows, n) * std::min(tiles.vocab, shard));
  for (std::int64_t r0 = 0; r0 < n; r0 += tiles.rows) {
    const std::int64_t rn = std::min(tiles.rows, n - r0);
    for (std::int64_t v0 = 0; v0 < shard; v0 += tiles.vocab) {
      const std::int64_t vn = std::min(tiles.vocab, shard - v0);
      logits_tile(h + r0 * dim, rn, vn, dim, w + v0 * dim, ws.data());
      launch_grad(ws.data(), rn, vn, vocab_begin + v0, targets + r0, lse + r0, scale, g.ptr);
      tile_backward(g.ptr, rn, vn, dim, h + r0 * dim, w + v0 * dim, dh + r0 * dim, dw + v0 * dim);
    }
  }
}

}  // namespace

void ce_shard_stats(const float* h, std::int64_t n, std::int64_t dim, const float* w, std::int64_t vocab_begin,
                    std::int64_t shard, const std::int32_t* targets, float* row_max, float* row_sumexp,
                    float* target_logit, const CrossEntropyTiles& tiles, float* workspace) {
  shard_stats<float>(h, n, dim, w, vocab_begin, shard, targets, row_max, row_sumexp, target_logit, tiles, workspace);
}

void ce_shard_stats(const bf16* h, std::int64_t n, std::int64_t dim, const bf16* w, std::int64_t vocab_begin,
                    std::int64_t shard, const std::int32_t* targets, float* row_max, float* row_sumexp,
                    float* target_logit, const CrossEntropyTiles& tiles, float* workspace) {
  shard_stats<bf16>(h, n, dim, w, vocab_begin, shard, targets, row_max, row_sumexp, target_logit, tiles, workspace);
}

CrossEntropyLoss ce_combine_stats(std::int64_t n, std::int64_t shards, const float* row_max, const float* row_sumexp,
                                  const float* target_logit, const std::int32_t* targets, float* lse) {
  CrossEntropyLoss loss;
  if (n <= 0) return loss;
  const unsigned blocks = grid_for(n, kThreads, kMaxCombineBlocks);
  DeviceBuffer<double> partial(3 * static_cast<std::int64_t>(blocks));
  combine_kernel<<<blocks, kThreads, 0, stream()>>>(n, shards, row_max, row_sumexp, target_logit, targets, lse,
                                                    partial.data());
  HERD_CUDA_LAUNCHED("ce_combine_stats");
  std::vector<double> host(3 * static_cast<std::size_t>(blocks));
  copy_to_host(host.data(), partial.data(), partial.bytes());  // synchronises the stream
  double count = 0, bad = 0;
  for (unsigned b = 0; b < blocks; ++b) {
    loss.loss_sum += host[3 * b];
    count += host[3 * b + 1];
    bad += host[3 * b + 2];
  }
  HERD_CHECK(bad == 0, bad, " targets are negative and not the ignore index");
  loss.count = static_cast<std::int64_t>(count);
  return loss;
}

void ce_shard_backward(const float* h, std::int64_t n, std::int64_t dim, const float* w, std::int64_t vocab_begin,
                       std::int64_t shard, const std::int32_t* targets, const float* lse, float scale, float* dh,
                       float* dw, const CrossEntropyTiles& tiles, float* workspace) {
  shard_backward<float>(h, n, dim, w, vocab_begin, shard, targets, lse, scale, dh, dw, tiles, workspace);
}

void ce_shard_backward(const bf16* h, std::int64_t n, std::int64_t dim, const bf16* w, std::int64_t vocab_begin,
                       std::int64_t shard, const std::int32_t* targets, const float* lse, float scale, float* dh,
                       float* dw, const CrossEntropyTiles& tiles, float* workspace) {
  shard_backward<bf16>(h, n, dim, w, vocab_begin, shard, targets, lse, scale, dh, dw, tiles, workspace);
}

}  // namespace herd::kernels::cuda
