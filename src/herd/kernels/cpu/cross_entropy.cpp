// Vocab-tiled cross-entropy fused with the output projection (contracts: cross_entropy.h).
//
// Per row tile, the logits of one vocab tile come from one GEMM into the workspace; the softmax
// statistics are updated online (running max, rescaled sum of exponentials), exactly as attention
// does along keys. The backward turns a recomputed tile into (softmax - onehot) * scale in place and
// feeds it to two GEMMs (dh += G w, dw += G^T h). Row-wise work is OpenMP-parallel; the GEMMs use the
// BLAS's threads.
#include "herd/kernels/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "herd/core/check.h"
#include "herd/kernels/convert.h"
#include "herd/kernels/cpu/common.h"
#include "herd/kernels/gemm.h"

namespace herd::kernels {

std::int64_t cross_entropy_workspace(const CrossEntropyTiles& tiles) { return tiles.rows * tiles.vocab; }

namespace {

// The caller's workspace, or this thread's scratch sized for the largest tile of n rows over a vocabulary
// (shard) of `vocab` ids: a smaller shard or batch than one tile needs no whole tile.
template <typename T>
T* workspace_or_scratch(T* ws, const CrossEntropyTiles& tiles, std::int64_t n, std::int64_t vocab) {
  HERD_CHECK(tiles.rows >= 1 && tiles.vocab >= 1, "cross-entropy tiles must be positive");
  if (ws) return ws;
  return cpu::thread_scratch<T, 0>(static_cast<std::size_t>(std::min(tiles.rows, std::max<std::int64_t>(n, 1)) *
                                                            std::min(tiles.vocab, std::max<std::int64_t>(vocab, 1))));
}

void check_targets(const std::int32_t* targets, std::int64_t n, std::int64_t vocab) {
  for (std::int64_t i = 0; i < n; ++i)
    HERD_CHECK(targets[i] == kIgnoreIndex || (targets[i] >= 0 && targets[i] < vocab), "target ", targets[i],
               " outside the vocabulary [0, ", vocab, ")");
}

// Folds one logits tile (rn, vn) into the running (max, sum-exp) and picks up target logits.
template <typename T>
HERD_CPU_CLONES void update_stats(const T* logits, std::int64_t rn, std::int64_t vn, std::int64_t tile_begin,
                                  const std::int32_t* targets, T* row_max, T* row_sumexp, T* target_logit) {
#pragma omp parallel for schedule(static) if (rn * vn > 65536)
  for (std::int64_t i = 0; i < rn; ++i) {
    const T* li = logits + i * vn;
    const T mx = cpu::row_max(li, vn);
    const T mnew = std::max(row_max[i], mx);
    T sum = 0;
#pragma omp simd reduction(+ : sum)
    for (std::int64_t j = 0; j < vn; ++j) sum += cpu::fast_exp(li[j] - mnew);
    const T prev = row_sumexp[i] == T(0) ? T(0) : row_sumexp[i] * cpu::fast_exp(row_max[i] - mnew);
    row_sumexp[i] = prev + sum;
    row_max[i] = mnew;
    const std::int64_t t = static_cast<std::int64_t>(targets[i]) - tile_begin;
    if (targets[i] != kIgnoreIndex && t >= 0 && t < vn) target_logit[i] = li[t];
  }
}

using cpu::put;  // a G element: the value itself, or rounded to bf16

// Turns a logits tile into G = (softmax - onehot) * scale, zero for ignored rows, into g: the logits
// themselves (G = T, in place), or (bf16 inputs) rounded straight into the two gradient GEMMs' input.
template <typename T, typename G>
HERD_CPU_CLONES void logits_to_grad(const T* logits, std::int64_t rn, std::int64_t vn, std::int64_t tile_begin,
                                    const std::int32_t* targets, const T* lse, T scale, G* g) {
#pragma omp parallel for schedule(static) if (rn * vn > 65536)
  for (std::int64_t i = 0; i < rn; ++i) {
    const T* li = logits + i * vn;
    G* gi = g + i * vn;
    if (targets[i] == kIgnoreIndex) {
      std::fill(gi, gi + vn, G{});
      continue;
    }
    const T l = lse[i];
    const std::int64_t t = static_cast<std::int64_t>(targets[i]) - tile_begin;
    const bool here = t >= 0 && t < vn;
    // The target's entry before the loop overwrites its logit (in place).
    const T p_t = here ? cpu::fast_exp(li[t] - l) * scale : T(0);
#pragma omp simd
    for (std::int64_t j = 0; j < vn; ++j) put(cpu::fast_exp(li[j] - l) * scale, gi[j]);
    if (here) put(p_t - scale, gi[t]);
  }
}

// The gradient of a logits tile, (rn, vn): G = (softmax - onehot) * scale, then dh += G w and
// dw += G^T h. In T; with bf16 h and w, G is rounded to bf16 (a per-thread tile) as it is made.
template <typename T>
void tile_backward(T* logits, std::int64_t rn, std::int64_t vn, std::int64_t tile_begin, const std::int32_t* targets,
                   const T* lse, T scale, std::int64_t dim, const T* h_rows, const T* w_rows, T* dh_rows, T* dw_rows) {
  logits_to_grad(logits, rn, vn, tile_begin, targets, lse, scale, logits);
  const T* g = logits;
  gemm<T>(Trans::kNo, Trans::kNo, rn, dim, vn, T(1), g, vn, w_rows, dim, T(1), dh_rows, dim);   // dh += G w
  gemm<T>(Trans::kYes, Trans::kNo, vn, dim, rn, T(1), g, vn, h_rows, dim, T(1), dw_rows, dim);  // dw += G^T h
}
void tile_backward(float* logits, std::int64_t rn, std::int64_t vn, std::int64_t tile_begin,
                   const std::int32_t* targets, const float* lse, float scale, std::int64_t dim, const bf16* h_rows,
                   const bf16* w_rows, float* dh_rows, float* dw_rows) {
  bf16* g16 = cpu::thread_scratch<bf16, 0>(static_cast<std::size_t>(rn * vn));
  logits_to_grad(logits, rn, vn, tile_begin, targets, lse, scale, g16);
  gemm_bf16(Trans::kNo, Trans::kNo, rn, dim, vn, 1.0f, g16, vn, w_rows, dim, 1.0f, dh_rows, dim);   // dh += G w
  gemm_bf16(Trans::kYes, Trans::kNo, vn, dim, rn, 1.0f, g16, vn, h_rows, dim, 1.0f, dw_rows, dim);  // dw += G^T h
}

// logits (rn, vn) = h_rows w_rows^T in T.
template <typename T>
void logits_tile(const T* h, std::int64_t rn, std::int64_t vn, std::int64_t dim, const T* w, T* logits) {
  gemm<T>(Trans::kNo, Trans::kYes, rn, vn, dim, T(1), h, dim, w, dim, T(0), logits, vn);
}
void logits_tile(const bf16* h, std::int64_t rn, std::int64_t vn, std::int64_t dim, const bf16* w, float* logits) {
  gemm_bf16(Trans::kNo, Trans::kYes, rn, vn, dim, 1.0f, h, dim, w, dim, 0.0f, logits, vn);
}

// In: the element type of h and w (T, or bf16 with T = float).
template <typename T, typename In>
void shard_stats(const In* h, std::int64_t n, std::int64_t dim, const In* w, std::int64_t vocab_begin,
                 std::int64_t shard, const std::int32_t* targets, T* row_max, T* row_sumexp, T* target_logit,
                 const CrossEntropyTiles& tiles, T* workspace) {
  T* logits = workspace_or_scratch(workspace, tiles, n, shard);
  std::fill(row_max, row_max + n, -std::numeric_limits<T>::infinity());
  std::fill(row_sumexp, row_sumexp + n, T(0));
  std::fill(target_logit, target_logit + n, T(0));
  for (std::int64_t r0 = 0; r0 < n; r0 += tiles.rows) {
    const std::int64_t rn = std::min(tiles.rows, n - r0);
    for (std::int64_t v0 = 0; v0 < shard; v0 += tiles.vocab) {
      const std::int64_t vn = std::min(tiles.vocab, shard - v0);
      logits_tile(h + r0 * dim, rn, vn, dim, w + v0 * dim, logits);
      update_stats(logits, rn, vn, vocab_begin + v0, targets + r0, row_max + r0, row_sumexp + r0, target_logit + r0);
    }
  }
}

template <typename T, typename In>
void shard_backward(const In* h, std::int64_t n, std::int64_t dim, const In* w, std::int64_t vocab_begin,
                    std::int64_t shard, const std::int32_t* targets, const T* lse, T scale, T* dh, T* dw,
                    const CrossEntropyTiles& tiles, T* workspace) {
  T* logits = workspace_or_scratch(workspace, tiles, n, shard);
  for (std::int64_t r0 = 0; r0 < n; r0 += tiles.rows) {
    const std::int64_t rn = std::min(tiles.rows, n - r0);
    for (std::int64_t v0 = 0; v0 < shard; v0 += tiles.vocab) {
      const std::int64_t vn = std::min(tiles.vocab, shard - v0);
      logits_tile(h + r0 * dim, rn, vn, dim, w + v0 * dim, logits);
      tile_backward(logits, rn, vn, vocab_begin + v0, targets + r0, lse + r0, scale, dim, h + r0 * dim, w + v0 * dim,
                    dh + r0 * dim, dw + v0 * dim);
    }
  }
}

}  // namespace

template <typename T>
void ce_shard_stats(const T* h, std::int64_t n, std::int64_t dim, const T* w, std::int64_t vocab_begin,
                    std::int64_t shard, const std::int32_t* targets, T* row_max, T* row_sumexp, T* target_logit,
                    const CrossEntropyTiles& tiles, T* workspace) {
  shard_stats<T, T>(h, n, dim, w, vocab_begin, shard, targets, row_max, row_sumexp, target_logit, tiles, workspace);
}

void ce_shard_stats(const bf16* h, std::int64_t n, std::int64_t dim, const bf16* w, std::int64_t vocab_begin,
                    std::int64_t shard, const std::int32_t* targets, float* row_max, float* row_sumexp,
                    float* target_logit, const CrossEntropyTiles& tiles, float* workspace) {
  shard_stats<float, bf16>(h, n, dim, w, vocab_begin, shard, targets, row_max, row_sumexp, target_logit, tiles,
                           workspace);
}

void ce_shard_backward(const bf16* h, std::int64_t n, std::int64_t dim, const bf16* w, std::int64_t vocab_begin,
                       std::int64_t shard, const std::int32_t* targets, const float* lse, float scale, float* dh,
                       float* dw, const CrossEntropyTiles& tiles, float* workspace) {
  shard_backward<float, bf16>(h, n, dim, w, vocab_begin, shard, targets, lse, scale, dh, dw, tiles, workspace);
}

namespace {

// lse (n) and the loss of per-shard stats (ce_combine_stats), added row by row into `loss`: the fused
// sweep below adds its row tiles into one total in the same order as one call over all rows would.
template <typename T>
void combine_into(CrossEntropyLoss& loss, std::int64_t n, std::int64_t shards, const T* row_max, const T* row_sumexp,
                  const T* target_logit, const std::int32_t* targets, T* lse) {
  for (std::int64_t i = 0; i < n; ++i) {
    T mx = -std::numeric_limits<T>::infinity();
    for (std::int64_t s = 0; s < shards; ++s) mx = std::max(mx, row_max[s * n + i]);
    double sum = 0, tl = 0;
    for (std::int64_t s = 0; s < shards; ++s) {
      sum += static_cast<double>(row_sumexp[s * n + i]) * std::exp(static_cast<double>(row_max[s * n + i] - mx));
      tl += static_cast<double>(target_logit[s * n + i]);
    }
    const double l = static_cast<double>(mx) + std::log(sum);
    lse[i] = static_cast<T>(l);
    if (targets[i] != kIgnoreIndex) {
      HERD_CHECK(targets[i] >= 0, "target ", targets[i], " is negative and not the ignore index");
      loss.loss_sum += l - tl;
      ++loss.count;
    }
  }
}

}  // namespace

template <typename T>
CrossEntropyLoss ce_combine_stats(std::int64_t n, std::int64_t shards, const T* row_max, const T* row_sumexp,
                                  const T* target_logit, const std::int32_t* targets, T* lse) {
  CrossEntropyLoss loss;
  combine_into(loss, n, shards, row_max, row_sumexp, target_logit, targets, lse);
  return loss;
}

template <typename T>
void ce_shard_backward(const T* h, std::int64_t n, std::int64_t dim, const T* w, std::int64_t vocab_begin,
                       std::int64_t shard, const std::int32_t* targets, const T* lse, T scale, T* dh, T* dw,
                       const CrossEntropyTiles& tiles, T* workspace) {
  shard_backward<T, T>(h, n, dim, w, vocab_begin, shard, targets, lse, scale, dh, dw, tiles, workspace);
}

namespace {

// The loss and lse over the whole vocabulary: row_max / sum-exp / target logit as one shard, then the
// single-shard combine; 3n scratch values. In: the element type of h and w (T, or bf16 with T = float).
template <typename T, typename In>
CrossEntropyLoss forward_stats(const In* h, std::int64_t n, std::int64_t dim, const In* w, std::int64_t vocab,
                               const std::int32_t* targets, T* lse, const CrossEntropyTiles& tiles, T* workspace) {
  T* stats = cpu::thread_scratch<T, 1>(static_cast<std::size_t>(3 * n));
  check_targets(targets, n, vocab);
  shard_stats<T, In>(h, n, dim, w, 0, vocab, targets, stats, stats + n, stats + 2 * n, tiles, workspace);
  return ce_combine_stats(n, 1, stats, stats + n, stats + 2 * n, targets, lse);
}

}  // namespace

template <typename T>
CrossEntropyLoss cross_entropy_forward(const T* h, std::int64_t n, std::int64_t dim, const T* w, std::int64_t vocab,
                                       const std::int32_t* targets, T* lse, const CrossEntropyTiles& tiles,
                                       T* workspace) {
  return forward_stats<T, T>(h, n, dim, w, vocab, targets, lse, tiles, workspace);
}

namespace {

template <typename T, typename In>
CrossEntropyLoss forward_backward(const In* h, std::int64_t n, std::int64_t dim, const In* w, std::int64_t vocab,
                                  const std::int32_t* targets, T scale, T* lse, T* dh, T* dw,
                                  const CrossEntropyTiles& tiles, T* workspace) {
  if (vocab > tiles.vocab) {  // several vocab tiles: statistics first, then recompute for gradients
    const CrossEntropyLoss loss = forward_stats<T, In>(h, n, dim, w, vocab, targets, lse, tiles, workspace);
    shard_backward<T, In>(h, n, dim, w, 0, vocab, targets, lse, scale, dh, dw, tiles, workspace);
    return loss;
  }
  // One vocab tile: the logits of a row tile are complete after one GEMM; reuse them for the gradient.
  // The same GEMMs on the same tiles as the two sweeps, so the same numbers, one logits GEMM fewer.
  check_targets(targets, n, vocab);
  T* logits = workspace_or_scratch(workspace, tiles, n, vocab);
  T* stats = cpu::thread_scratch<T, 1>(static_cast<std::size_t>(3 * tiles.rows));
  CrossEntropyLoss total;
  for (std::int64_t r0 = 0; r0 < n; r0 += tiles.rows) {
    const std::int64_t rn = std::min(tiles.rows, n - r0);
    T *mx = stats, *se = stats + rn, *tl = stats + 2 * rn;
    std::fill(mx, mx + rn, -std::numeric_limits<T>::infinity());
    std::fill(se, se + rn, T(0));
    std::fill(tl, tl + rn, T(0));
    logits_tile(h + r0 * dim, rn, vocab, dim, w, logits);
    update_stats(logits, rn, vocab, 0, targets + r0, mx, se, tl);
    combine_into(total, rn, 1, mx, se, tl, targets + r0, lse + r0);
    tile_backward(logits, rn, vocab, 0, targets + r0, lse + r0, scale, dim, h + r0 * dim, w, dh + r0 * dim, dw);
  }
  return total;
}

}  // namespace

template <typename T>
CrossEntropyLoss cross_entropy_forward_backward(const T* h, std::int64_t n, std::int64_t dim, const T* w,
                                                std::int64_t vocab, const std::int32_t* targets, T scale, T* lse, T* dh,
                                                T* dw, const CrossEntropyTiles& tiles, T* workspace) {
  return forward_backward<T, T>(h, n, dim, w, vocab, targets, scale, lse, dh, dw, tiles, workspace);
}

CrossEntropyLoss cross_entropy_forward_backward(const bf16* h, std::int64_t n, std::int64_t dim, const bf16* w,
                                                std::int64_t vocab, const std::int32_t* targets, float scale,
                                                float* lse, float* dh, float* dw, const CrossEntropyTiles& tiles,
                                                float* workspace) {
  return forward_backward<float, bf16>(h, n, dim, w, vocab, targets, scale, lse, dh, dw, tiles, workspace);
}

#define HERD_INSTANTIATE(T)                                                                                        \
  template void ce_shard_stats<T>(const T*, std::int64_t, std::int64_t, const T*, std::int64_t, std::int64_t,      \
                                  const std::int32_t*, T*, T*, T*, const CrossEntropyTiles&, T*);                  \
  template CrossEntropyLoss ce_combine_stats<T>(std::int64_t, std::int64_t, const T*, const T*, const T*,          \
                                                const std::int32_t*, T*);                                          \
  template void ce_shard_backward<T>(const T*, std::int64_t, std::int64_t, const T*, std::int64_t, std::int64_t,   \
                                     const std::int32_t*, const T*, T, T*, T*, const CrossEntropyTiles&, T*);      \
  template CrossEntropyLoss cross_entropy_forward<T>(const T*, std::int64_t, std::int64_t, const T*, std::int64_t, \
                                                     const std::int32_t*, T*, const CrossEntropyTiles&, T*);       \
  template CrossEntropyLoss cross_entropy_forward_backward<T>(const T*, std::int64_t, std::int64_t, const T*,      \
                                                              std::int64_t, const std::int32_t*, T, T*, T*, T*,    \
                                                              const CrossEntropyTiles&, T*);
HERD_INSTANTIATE(float)
HERD_INSTANTIATE(double)
#undef HERD_INSTANTIATE

}  // namespace herd::kernels
