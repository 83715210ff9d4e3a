// DistributedLlama: one rank's share of a Llama 3 model under tensor parallelism (TP, with or without
// sequence parallelism) and FSDP over the data-parallel group.
//
// The model has the unit structure of nn::LlamaModel (embedding | layer 0 | ... | layer L-1 | final
// norm + head). Each unit holds this TP rank's part of its weights (q/k/v and gate/up rows, o and down
// columns, vocabulary rows of the embedding and head; norms replicated) as one flat buffer, which FSDP
// shards over DP (parallel/fsdp/flat_unit.h). The layers are nn::TransformerBlock built from the local
// sizes with the TP collectives plugged in (parallel/tp/collectives.h), so the layer arithmetic is the
// single-rank code. Full (unsharded, nn::LlamaModel-layout) weights go in and out through load_full and
// gather_full, which is how init_weights equals nn::LlamaModel::init_weights exactly and how the parity
// tests and checkpoints see the model.
//
// A step: zero_grads(); forward_backward() per micro-batch of this DP rank (the same micro-batch on
// every TP rank), the last one with last_micro_batch = true so that each unit's gradient is
// reduce-scattered over DP right after its backward; step() clips with the global norm (over every DP
// shard and TP rank, replicated norms counted once) and applies AdamW to the shards. The loss a call
// returns is this DP rank's micro-batch sum and real-token count, identical on all TP ranks: sum it
// over DP only. loss_scale is 1 / (real tokens of the whole global step), so the DP sum of gradients
// is the gradient of the mean loss. Gradients accumulate in T (double in the parity tests, float in
// fp32 training): the accumulation type is the element type.
//
// Scope: TP x DP (cp = pp = 1 inside this class; the cp and pp modules compose around it).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "herd/kernels/cross_entropy.h"
#include "herd/kernels/optim.h"
#include "herd/kernels/rope.h"
#include "herd/model/config.h"
#include "herd/model/flops.h"
#include "herd/nn/batch.h"
#include "herd/nn/block.h"
#include "herd/nn/model.h"
#include "herd/parallel/context.h"
#include "herd/parallel/fsdp/flat_unit.h"
#include "herd/parallel/tp/collectives.h"
#include "herd/tensor/arena.h"

namespace herd::parallel {

// Refuses, before any rank starts, a layout this model cannot run: the degrees must multiply to the
// world size, tp must divide heads, kv heads, ffn and vocab, dp the global batch (sequences per step),
// and with sequence parallelism tp must divide seq_len. One line naming the numbers and the fix.
Status validate_layout(const model::LlamaConfig& cfg, const topology::ParallelDims& dims, std::int64_t world_size,
                       std::int64_t global_batch, std::int64_t seq_len, bool sequence_parallel);

// How a full weight is cut over TP.
enum class TpSplit { kReplicated, kRows, kCols };

// Where one full (nn::LlamaModel) weight lives on this rank.
struct ShardedParam {
  nn::NamedParam full;  // name, offset in the full flat buffer, (rows, cols)
  int unit = 0;
  std::int64_t local_offset = 0;  // in the unit's flat (TP-local) buffer
  TpSplit split = TpSplit::kReplicated;
  std::int64_t local_count = 0;
};

template <typename T>
class DistributedLlama {
 public:
  DistributedLlama(const model::LlamaConfig& cfg, const ParallelContext& ctx, model::Recompute recompute,
                   std::int64_t micro_batch, std::int64_t seq_len);
  ~DistributedLlama();

  const model::LlamaConfig& config() const { return cfg_; }
  std::int64_t full_param_count() const { return full_count_; }
  const std::vector<ShardedParam>& params() const { return params_; }
  std::int64_t unit_count() const { return static_cast<std::int64_t>(units_.size()); }
  fsdp::FlatUnit<T>& unit(std::int64_t i) { return *units_[static_cast<std::size_t>(i)]; }
  tensor::Arena& arena() { return *arena_; }

  // Equal to nn::LlamaModel::init_weights(seed) once gathered (built full, then sharded).
  void init_weights(std::uint64_t seed);
  // Takes this rank's shard of full weights (nn::LlamaModel layout, full_param_count() elements).
  void load_full(const T* full);
  // Collective over TP and DP: the full weights (or reduced gradients) on every rank.
  Result<std::vector<T>> gather_full_weights() { return gather_full(false); }
  Result<std::vector<T>> gather_full_grads() { return gather_full(true); }

  void zero_grads();
  Result<kernels::CrossEntropyLoss> forward_backward(const nn::MicroBatch& mb, T loss_scale, bool last_micro_batch);
  // Global-norm clipping (max_norm 0: none) and AdamW on the shards; returns the norm before clipping.
  Result<double> step(const kernels::AdamWConfig& base, double lr, double max_norm);
  std::int64_t steps() const { return step_; }

 private:
  Result<std::vector<T>> gather_full(bool grads);
  Status finish_unit(std::size_t u);  // TP-sum of SP norm gradients, then the DP reduce-scatter
  double counted_sum_squares(std::size_t u) const;

  model::LlamaConfig cfg_;
  ParallelContext ctx_;
  model::Recompute recompute_;
  std::int64_t max_rows_ = 0, max_seq_ = 0, full_count_ = 0;
  nn::LayerSizes local_;
  tp::VocabShard vocab_;
  std::unique_ptr<tp::TpCollectives<T>> tpc_;
  std::vector<std::unique_ptr<fsdp::FlatUnit<T>>> units_;
  std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> norm_ranges_;  // per unit: [begin, end)
  std::vector<ShardedParam> params_;
  std::vector<nn::TransformerBlock<T>> blocks_;
  std::unique_ptr<kernels::RopeTable<T>> rope_;
  std::unique_ptr<tensor::Arena> arena_;
  std::vector<AlignedPtr<T>> m_, v_;  // AdamW moments per unit shard
  std::int64_t step_ = 0;
};

}  // namespace herd::parallel
