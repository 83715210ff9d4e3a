// Cross-entropy over a large vocabulary, fused with the output projection and tiled so that no more
// than one (row tile x vocab tile) block of logits ever exists.
//
// Inputs: hidden h (n, dim), the output weight w (V, dim) or one vocab shard of it (rows
// [vocab_begin, vocab_begin + shard)), targets (n) with kIgnoreIndex for padding. Per row:
//   logits = h w^T,  lse = log sum_v exp(logits_v),  loss = lse - logits[target].
// The forward returns the loss sum and the count of real tokens and saves lse (n) for the backward;
// the backward recomputes the logits tile by tile and accumulates
//   dh += (softmax - onehot(target)) * scale * w,   dw += (softmax - onehot)^T * scale * h,
// where `scale` is dLoss/dloss_row (1 / global token count for a mean loss); ignored rows give zero.
// Cost: the forward and the backward each do one h w^T GEMM; the backward adds two more (dh, dw).
// cross_entropy_forward_backward does both in one sweep and, when the vocab fits one tile, reuses the
// forward's logits (3 GEMMs instead of 4).
//
// Vocab parallelism (parallel/tp) over more than one rank uses the pieces (one rank: the one sweep):
// ce_shard_stats on each rank's shard, an all-gather of (max, sum-exp, target logit) combined by
// ce_combine_stats, then ce_shard_backward on each shard.
#pragma once

#include <cstdint>

#include "herd/core/bf16.h"

namespace herd::kernels {

inline constexpr std::int32_t kIgnoreIndex = -1;

struct CrossEntropyTiles {
  std::int64_t rows = 256;    // rows of h per tile
  std::int64_t vocab = 8192;  // vocab entries per tile (logits tile: rows x vocab)
};

struct CrossEntropyLoss {
  double loss_sum = 0;     // sum over real tokens of lse - logit[target]
  std::int64_t count = 0;  // real (non-ignored) tokens
};

// Scratch elements the kernels need for the given tiles (one logits tile); pass a buffer of at least
// this size as `workspace`, or nullptr to use a per-thread buffer the kernel grows once.
std::int64_t cross_entropy_workspace(const CrossEntropyTiles& tiles);

// Over one vocab shard: per row max logit, sum of exp(logit - max), and the target's logit when the
// target lies in the shard (else 0; so summing over shards gives the target logit). All (n), written.
template <typename T>
void ce_shard_stats(const T* h, std::int64_t n, std::int64_t dim, const T* w, std::int64_t vocab_begin,
                    std::int64_t shard, const std::int32_t* targets, T* row_max, T* row_sumexp, T* target_logit,
                    const CrossEntropyTiles& tiles = {}, T* workspace = nullptr);

// Combines per-shard stats (shard-major: stats of shard s at offset s * n) into lse (n) and the loss.
template <typename T>
CrossEntropyLoss ce_combine_stats(std::int64_t n, std::int64_t shards, const T* row_max, const T* row_sumexp,
                                  const T* target_logit, const std::int32_t* targets, T* lse);

// Gradients over one shard (see the file comment); dh (n, dim) and dw (shard, dim) accumulate.
template <typename T>
void ce_shard_backward(const T* h, std::int64_t n, std::int64_t dim, const T* w, std::int64_t vocab_begin,
                       std::int64_t shard, const std::int32_t* targets, const T* lse, T scale, T* dh, T* dw,
                       const CrossEntropyTiles& tiles = {}, T* workspace = nullptr);

// The same two with h and w in bf16 (`train.precision = bf16`): the logits tiles come from gemm_bf16
// in fp32, the statistics, lse and G = (softmax - onehot) x scale are fp32, and G is rounded to bf16
// per tile for the two gradient GEMMs (their inputs, as every matmul input under bf16); dh and dw
// accumulate in fp32. `workspace` is fp32 as above.
void ce_shard_stats(const bf16* h, std::int64_t n, std::int64_t dim, const bf16* w, std::int64_t vocab_begin,
                    std::int64_t shard, const std::int32_t* targets, float* row_max, float* row_sumexp,
                    float* target_logit, const CrossEntropyTiles& tiles = {}, float* workspace = nullptr);
void ce_shard_backward(const bf16* h, std::int64_t n, std::int64_t dim, const bf16* w, std::int64_t vocab_begin,
                       std::int64_t shard, const std::int32_t* targets, const float* lse, float scale, float* dh,
                       float* dw, const CrossEntropyTiles& tiles = {}, float* workspace = nullptr);

// Single shard (the whole vocab): loss and lse (n).
template <typename T>
CrossEntropyLoss cross_entropy_forward(const T* h, std::int64_t n, std::int64_t dim, const T* w, std::int64_t vocab,
                                       const std::int32_t* targets, T* lse, const CrossEntropyTiles& tiles = {},
                                       T* workspace = nullptr);

// Forward and backward in one sweep; `scale` as above (pass 1 / count for the mean over this call's
// tokens, or 1 / global count). lse (n) written, dh and dw accumulate.
template <typename T>
CrossEntropyLoss cross_entropy_forward_backward(const T* h, std::int64_t n, std::int64_t dim, const T* w,
                                                std::int64_t vocab, const std::int32_t* targets, T scale, T* lse, T* dh,
                                                T* dw, const CrossEntropyTiles& tiles = {}, T* workspace = nullptr);
// The same with h and w in bf16 (as ce_shard_stats and ce_shard_backward above).
CrossEntropyLoss cross_entropy_forward_backward(const bf16* h, std::int64_t n, std::int64_t dim, const bf16* w,
                                                std::int64_t vocab, const std::int32_t* targets, float scale,
                                                float* lse, float* dh, float* dw, const CrossEntropyTiles& tiles = {},
                                                float* workspace = nullptr);

}  // namespace herd::kernels
