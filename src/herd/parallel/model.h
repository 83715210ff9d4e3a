// DistributedLlama: one rank's share of a Llama 3 model under tensor parallelism (TP, with or without
// sequence parallelism), context parallelism (CP) and FSDP over the combined CP x DP group, with pp = 1.
//
// The model is one DistributedStage (dist_stage.h) holding every unit of nn::LlamaModel's structure
// (embedding | layer 0 | ... | layer L-1 | final norm + head), each a flat buffer of this TP rank's part
// of its weights, FSDP-sharded over ctx.fsdp(). The layers are nn::TransformerBlock built from the local
// sizes with the TP collectives (parallel/tp/collectives.h) and, when cp > 1, the CP attention
// (parallel/cp/cp_hooks.h) plugged in, so the layer arithmetic is the single-rank code. Full (unsharded,
// nn::LlamaModel-layout) weights go in and out through load_full and gather_full, which is how the
// parity tests and checkpoints see the model; init_weights fills each rank's shards with exactly the
// values nn::LlamaModel::init_weights gives the same elements (counter-based, nn/init.h). A pipeline rank
// (pp/executor.h) runs the same stage class, one per chunk.
//
// A step: zero_grads(); forward_backward() per micro-batch of this rank's (dp, cp) slice (the same
// micro-batch on every TP rank), the last one with last_micro_batch = true so that each unit's gradient
// is reduce-scattered over CP x DP right after its backward; step() clips with the global norm (over
// every CP x DP shard and TP rank, replicated norms counted once) and applies AdamW to the shards. The
// loss a call returns is this slice's sum and real-token count, identical on all TP ranks: sum it over
// CP and DP only. loss_scale is 1 / (real tokens of the whole global step), so the sum of gradients is
// the gradient of the mean loss. Gradients accumulate in T (double in the parity tests, float in fp32
// training): the accumulation type is the element type.
//
// Context parallelism: with cp > 1 each rank holds the CP-local rows of each sequence (data::slice_batch:
// chunks r and 2 CP - 1 - r, so a micro-batch is (B, seq_len / cp)), the blocks' attention goes through
// cp::CpAttentionHooks (K/V all-gathered over CP, dK/dV reduce-scattered), and sequence parallelism cuts
// those local rows over TP. CP ranks see different tokens of the same weights, so each unit is FSDP-
// sharded over the combined CP x DP group (ParallelContext::fsdp()): its reduce-scatter sums the
// gradient over CP and DP at once, exactly once, and the optimizer state is split over cp x dp ranks.
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
#include "herd/parallel/context.h"
#include "herd/parallel/cp/cp_hooks.h"
#include "herd/parallel/dist_stage.h"
#include "herd/parallel/tp/collectives.h"
#include "herd/tensor/arena.h"

namespace herd::parallel {

// Refuses, before any rank starts, a layout this model cannot run: the degrees must multiply to the
// world size (topology::ParallelDims::check_world), the shard rules must hold (model::check_shardable:
// tp divides heads, kv heads, ffn and vocab, 2 x cp divides seq_len, tp divides seq_len / cp under
// sequence parallelism), and dp must divide the global batch (sequences per step). One line naming
// the numbers and the fix.
Status validate_layout(const model::LlamaConfig& cfg, const topology::ParallelDims& dims, std::int64_t world_size,
                       std::int64_t global_batch, std::int64_t seq_len, bool sequence_parallel);

// The real (non-ignored) tokens of the global step from this rank's count of its own micro-batches:
// summed over DP and CP (different tokens), not over TP or PP (the same tokens). 1 / this is the
// loss_scale of every rank, so each token is counted exactly once in the mean loss.
Result<std::int64_t> global_real_tokens(const ParallelContext& ctx, std::int64_t local_count);

template <typename T>
class DistributedLlama {
 public:
  // micro_batch: this rank's sequences per micro-batch; seq_len: the full sequence length (each rank
  // holds seq_len / cp tokens of each).
  DistributedLlama(const model::LlamaConfig& cfg, const ParallelContext& ctx, model::Recompute recompute,
                   std::int64_t micro_batch, std::int64_t seq_len);
  ~DistributedLlama();

  const model::LlamaConfig& config() const { return cfg_; }
  std::int64_t full_param_count() const { return full_count_; }
  const std::vector<ShardedParam>& params() const { return stage_->params(); }
  std::int64_t unit_count() const { return stage_->unit_count(); }
  fsdp::FlatUnit<T>& unit(std::int64_t i) { return stage_->unit(i); }
  DistributedStage<T>& stage() { return *stage_; }
  tensor::Arena& arena() { return *arena_; }

  // Equal to nn::LlamaModel::init_weights(seed) once gathered; each rank computes only its shards.
  void init_weights(std::uint64_t seed);
  // Takes this rank's shard of full weights (nn::LlamaModel layout, full_param_count() elements).
  void load_full(const T* full) { stage_->load_full(full); }
  // Collective over TP, CP and DP: the full weights (or reduced gradients) on every rank.
  Result<std::vector<T>> gather_full_weights() { return gather_full(false); }
  Result<std::vector<T>> gather_full_grads() { return gather_full(true); }

  void zero_grads() { stage_->zero_grads(); }
  Result<kernels::CrossEntropyLoss> forward_backward(const nn::MicroBatch& mb, T loss_scale, bool last_micro_batch);
  // Forward only (evaluation): the micro-batch's loss sum and real tokens, as forward_backward returns
  // them; the gradients are untouched (the head adds exact zeros) and every unit is released after.
  Result<kernels::CrossEntropyLoss> evaluate(const nn::MicroBatch& mb);
  // The same forward, and the logits of this TP rank's vocabulary rows: out (rows, vocab / tp), fp32
  // (bf16 matmul inputs under bf16). Collective over TP and CP x DP like evaluate.
  Status logits(const nn::MicroBatch& mb, T* out);
  // Global-norm clipping (max_norm 0: none) and AdamW on the shards; returns the norm before clipping.
  Result<double> step(const kernels::AdamWConfig& base, double lr, double max_norm);
  // The two halves of step(): the global gradient norm (collective over TP and CP x DP), then clipping
  // by it and AdamW on this rank's shards (local).
  Result<double> grad_norm();
  void apply(const kernels::AdamWConfig& base, double lr, double max_norm, double norm);
  std::int64_t steps() const { return step_; }
  // AdamW state of unit u's shard (shard_size() elements each) and the step count, for checkpoints.
  T* adam_m(std::int64_t u) { return stage_->adam_m(u); }
  T* adam_v(std::int64_t u) { return stage_->adam_v(u); }
  void set_steps(std::int64_t s) { step_ = s; }

 private:
  Result<std::vector<T>> gather_full(bool grads);

  model::LlamaConfig cfg_;
  ParallelContext ctx_;
  std::int64_t max_rows_ = 0, max_seq_ = 0, full_count_ = 0;
  std::unique_ptr<tp::TpCollectives<T>> tpc_;
  std::unique_ptr<cp::CpAttentionHooks<T>> cph_;  // cp > 1 only
  std::unique_ptr<DistributedStage<T>> stage_;
  std::unique_ptr<tensor::Arena> arena_;
  std::int64_t step_ = 0;
};

}  // namespace herd::parallel
