// Shared pieces of the DistributedLlama tests: a small GQA model, deterministic packed batches, the
// single-rank reference step, and running a layout's ranks as threads over the local backend.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "comm/comm_test_util.h"
#include "common/test_model.h"
#include "herd/kernels/cross_entropy.h"
#include "herd/kernels/optim.h"
#include "herd/nn/model.h"
#include "herd/parallel/context.h"
#include "herd/parallel/rank_model.h"

namespace herd::parallel::testing {

// 8 query heads over 4 KV heads (GQA), so tp = 4 still leaves a group of 2 query heads per KV head.
inline model::LlamaConfig small_gqa_model() {
  return herd::test_models::test_llama({.name = "parity",
                                        .hidden = 16,
                                        .ffn = 32,
                                        .heads = 8,
                                        .kv_heads = 4,
                                        .head_dim = 4,
                                        .vocab = 32,
                                        .max_seq = 16});
}

// A global batch of `seqs` rows of length t: two documents per row (positions restart, doc ids
// change), some targets ignored (-1), so masks and the real-token count are exercised.
struct Batch {
  std::int64_t seqs = 0, t = 0;
  std::vector<std::int32_t> tokens, targets, positions, doc_ids;
  nn::MicroBatch rows(std::int64_t first, std::int64_t count) const {
    const std::int64_t o = first * t;
    return {count, t, tokens.data() + o, targets.data() + o, positions.data() + o, doc_ids.data() + o};
  }
  std::int64_t real_tokens() const {
    return std::count_if(targets.begin(), targets.end(), [](std::int32_t x) { return x >= 0; });
  }
};

inline Batch make_batch(std::int64_t seqs, std::int64_t t, std::int64_t vocab, std::uint32_t seed) {
  Batch b;
  b.seqs = seqs;
  b.t = t;
  std::mt19937 rng(seed);
  for (std::int64_t s = 0; s < seqs; ++s) {
    const std::int64_t cut = 1 + static_cast<std::int64_t>(rng() % static_cast<std::uint32_t>(t - 1));
    for (std::int64_t i = 0; i < t; ++i) {
      b.tokens.push_back(static_cast<std::int32_t>(rng() % static_cast<std::uint32_t>(vocab)));
      const bool ignored = rng() % 5 == 0 || i == cut - 1;  // no target across a document boundary
      b.targets.push_back(ignored ? -1 : static_cast<std::int32_t>(rng() % static_cast<std::uint32_t>(vocab)));
      b.positions.push_back(static_cast<std::int32_t>(i < cut ? i : i - cut));
      b.doc_ids.push_back(i < cut ? 0 : 1);
    }
  }
  return b;
}

// max |a - b| over max |b| for the full parameter `p` (an absolute floor for all-zero references).
template <typename T>
double rel_diff(const std::vector<T>& a, const T* b, const nn::NamedParam& p) {
  double diff = 0, scale = 1e-30;
  for (std::int64_t i = p.offset; i < p.offset + p.count(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[static_cast<std::size_t>(i)]) - static_cast<double>(b[i])));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return diff / scale;
}

// ||a - b|| / ||b|| over the full parameter `p` (the fp32 weight criterion: single elements whose
// gradient is rounding noise get an Adam step of either sign, so an elementwise bound would measure
// the noise, not the implementation).
template <typename T>
double rel_l2(const std::vector<T>& a, const T* b, const nn::NamedParam& p) {
  double diff = 0, norm = 1e-300;
  for (std::int64_t i = p.offset; i < p.offset + p.count(); ++i) {
    const double x = static_cast<double>(a[static_cast<std::size_t>(i)]), y = static_cast<double>(b[i]);
    diff += (x - y) * (x - y);
    norm += y * y;
  }
  return std::sqrt(diff / norm);
}

// The rank's model at pp = 1, sized for micro-batches of `micro_batch` sequences of seq_len tokens,
// `microbatches` of them per step.
template <typename T>
Result<std::unique_ptr<RankModel<T>>> rank_model(const ParallelContext& ctx, const model::LlamaConfig& cfg,
                                                 model::Recompute recompute, std::int64_t micro_batch,
                                                 std::int64_t seq_len, int microbatches = 1) {
  RankModelOptions o;
  o.recompute = recompute;
  o.micro_batch = micro_batch;
  o.seq_len = seq_len;
  o.schedule.microbatches = microbatches;
  return RankModel<T>::make(ctx, cfg, o);
}

// Runs fn(ctx) on every rank of a tp x dp layout.
inline void run_layout(std::int64_t tp, std::int64_t dp, bool sp, bool reshard,
                       const std::function<Status(const ParallelContext&)>& fn) {
  const topology::ParallelDims dims = *topology::ParallelDims::make(tp, 1, 1, dp);
  comm::testing::run_ranks(static_cast<int>(dims.world()), [&](comm::Communicator& world) -> Status {
    HERD_ASSIGN_OR_RETURN(auto groups, ParallelGroups::make(world, dims));
    return fn(groups->context(sp, reshard));
  });
}

}  // namespace herd::parallel::testing
