// DistributedStage: a contiguous slice of the Llama model (the embedding, some layers, the final norm +
// head) on one rank of a TP x CP x DP group, with its FSDP units, TP and CP hooks and optimizer state.
//
// Its units and weights are those of the weight table (model::llama_weights at this TP degree).
// It is the one place that holds the per-unit logic of the distributed runtime: at pp = 1 the rank
// model (parallel/rank_model.h) is a single stage holding every unit, and each chunk of a pipeline rank
// (pp/executor.h) is one stage holding the units of its virtual stage's layers. A unit holds this TP
// rank's part of its weights (q/k/v and gate/up rows, o and down columns, vocabulary rows of the
// embedding and head; norms replicated) as one flat buffer, FSDP-sharded over ctx.fsdp() (CP x DP).
// Full (nn::LlamaModel-layout) weights go in through load_full and out through gather_full, so a
// stage's weights are comparable with the single-rank model by name.
//
// Activations: x is this rank's rows of the residual stream (n_loc = local_rows(B x T_loc), T_loc =
// seq_len / cp, n_loc = its 1/tp with sequence parallelism). forward() keeps exactly the tensors
// model/activations.h lists (the embedding ids, each layer's list, the head's list) in the caller's
// arena; backward() frees them. On the last stage the head either runs its backward right after its
// forward (fuse_head: one pass, the training step) or keeps its saved tensors for a later backward
// (pipelines: the loss is computed in the forward, the logits again in the backward).
//
// FSDP: forward waits for each unit's gather and prefetches the next; backward re-gathers when the
// context reshards after forward. The step's last backward of the stage (last_of_step) TP-sums the
// norm gradients under SP and posts each unit's reduce-scatter over CP x DP; wait_grads() completes
// them. Units are released after each backward (release_after_backward) or only after the step's last
// one (pipelines keep a chunk gathered across its micro-batches).
// bf16 (ctx.bf16(), `train.precision = bf16`): units gather bf16 copies of their fp32 master shards, the
// blocks run in bf16 mode, the embedding reads the bf16 table, the head's final norm keeps its input
// and output in bf16 and the loss GEMMs take bf16 inputs; gradients, their reduce-scatter, the
// clipping norm and AdamW stay fp32 (docs/precision.md).
// Legend: N = B x T_loc rows of this rank, n_loc its norm rows, d hidden.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "herd/core/aligned.h"
#include "herd/kernels/cross_entropy.h"
#include "herd/kernels/ops.h"
#include "herd/kernels/optim.h"
#include "herd/kernels/rope.h"
#include "herd/model/config.h"
#include "herd/model/flops.h"
#include "herd/model/weights.h"
#include "herd/nn/batch.h"
#include "herd/nn/block.h"
#include "herd/nn/model.h"
#include "herd/parallel/context.h"
#include "herd/parallel/cp/cp_hooks.h"
#include "herd/parallel/fsdp/flat_unit.h"
#include "herd/parallel/tp/collectives.h"
#include "herd/tensor/arena.h"

namespace herd::parallel {

// Where one weight of the table (model/weights.h, at this rank's TP degree) lives on this rank.
struct ShardedParam {
  model::Weight w;  // name, full shape and offset, TP split, local shape and offset in its unit's buffer
  int unit = 0;     // index among the stage's units
  int index = 0;    // in the weight table (the initialisation stream of the weight)
};

// What one micro-batch keeps from a stage's forward until its backward (pointers into the arena).
template <typename T>
struct DistStageState {
  tensor::Arena::Mark start;    // the arena before the first saved tensor
  std::int32_t* ids = nullptr;  // embedding.ids (N), first stage only
  std::vector<nn::BlockState<T>> blocks;
  tensor::Arena::Mark head_mark;  // the arena before the head's saved tensors
  T* fin_in = nullptr;            // final_norm.input (n_loc, d)
  T* fin_rstd = nullptr;          // final_norm.rstd (n_loc)
  T* fin_out = nullptr;           // final_norm.output (n_loc, d)
  bf16* fin_in_h = nullptr;       // bf16 stages: final_norm.input and .output in bf16 instead
  bf16* fin_out_h = nullptr;
  T* lse = nullptr;                 // loss.lse (N)
  std::int32_t* targets = nullptr;  // loss.targets (N)
  bool head_done = false;           // fused head: its backward ran in the forward
  kernels::CrossEntropyLoss loss;   // last stage: this micro-batch's loss sum and real tokens
};

template <typename T>
class DistributedStage {
 public:
  using State = DistStageState<T>;

  // layers: global layer indices (consecutive); first / last: the stage holds the embedding / the head.
  // tpc, cph (cp > 1 only) and rope are shared by the stages of a rank and must outlive them.
  DistributedStage(const model::LlamaConfig& cfg, const ParallelContext& ctx, model::Recompute recompute,
                   std::vector<int> layers, bool first, bool last, tp::TpCollectives<T>* tpc,
                   cp::CpAttentionHooks<T>* cph, std::shared_ptr<const kernels::RopeTable<T>> rope,
                   bool release_after_backward);
  DistributedStage(DistributedStage&&) noexcept = default;
  ~DistributedStage();

  bool first() const { return first_; }
  bool last() const { return last_; }
  const std::vector<int>& layers() const { return layers_; }
  const std::vector<ShardedParam>& params() const { return params_; }
  std::int64_t unit_count() const { return static_cast<std::int64_t>(units_.size()); }
  fsdp::FlatUnit<T>& unit(std::int64_t i) { return *units_[static_cast<std::size_t>(i)]; }
  T* adam_m(std::int64_t u) { return m_[static_cast<std::size_t>(u)].template as<T>(); }
  T* adam_v(std::int64_t u) { return v_[static_cast<std::size_t>(u)].template as<T>(); }
  // Rows of the stage boundary (x, dx) for a micro-batch of n local rows.
  std::int64_t boundary_rows(std::int64_t n) const { return tpc_->local_rows(n); }

  // Fills this rank's shards with nn::LlamaModel::init_weights(seed)'s values of the same elements, each
  // computed from its global index (nn/init.h): no rank builds more than its own shards.
  void init_weights(std::uint64_t seed);
  // Takes this rank's shard of the stage's weights from full (nn::LlamaModel layout).
  void load_full(const T* full);
  // Collective over TP and CP x DP: writes the stage's full weights (or reduced gradients) into `full`
  // (nn::LlamaModel layout; other entries untouched).
  Status gather_full(bool grads, T* full);
  void zero_grads();
  // The master shards were written from outside (a checkpoint load): bf16 copies are refreshed.
  void params_updated();
  bool bf16_compute() const { return ctx_.bf16(); }
  // The op interface of the rank's device (ParallelContext::device): where the stage's buffers live.
  const kernels::Ops& ops() const { return *ops_; }

  // Pipelines: the CP masks of the step's micro-batches (collective over CP) and the one to use next.
  Status prepare_micro_batches(const std::vector<nn::MicroBatch>& mbs);
  void select_micro_batch(int m);

  // x (n_loc, d): the stage input (ignored on the first stage), replaced by its output (last stage
  // with fuse_head: the gradient dLoss/dx of the final residual, ready for backward()).
  Result<State> forward(tensor::Arena& arena, const nn::MicroBatch& mb, T* x, T loss_scale, bool fuse_head);
  // The executor's form: the head keeps its saved tensors for the backward.
  Result<State> forward(tensor::Arena& arena, const nn::MicroBatch& mb, T* x) {
    return forward(arena, mb, x, T(0), false);
  }
  // dx (n_loc, d): dLoss/d(output) in (ignored on the last stage), dLoss/d(input) out. Accumulates the
  // weight gradients, frees `st` and, when last_of_step, posts the units' reduce-scatters.
  Status backward(tensor::Arena& arena, const nn::MicroBatch& mb, State& st, T loss_scale, T* dx, bool last_of_step);
  // Completes the reduce-scatters posted by the step's last backward.
  Status wait_grads();
  // Last stage, after a forward of `st` (n rows): the logits of this TP rank's vocabulary rows, out
  // (n, vocab / tp) row-major, from the final norm's output and the head weights at the stage's
  // precision (bf16 inputs, fp32 logits under bf16). Collective over TP (the rows are gathered).
  void head_logits(tensor::Arena& a, std::int64_t n, const State& st, T* out);

  // Sum of squares of this rank's gradient shards, replicated norm weights on TP rank 0 only.
  double counted_sum_squares() const;
  // Scales the gradient shards by clip (< 1: clipping) and applies AdamW (step count `step`).
  void adamw(const kernels::AdamWConfig& cfg, double clip, std::int64_t step);

  // Arena bytes one micro-batch needs: the saved tensors plus one layer's backward scratch and the TP
  // and CP buffers (an upper bound; the measured bytes are the slot's).
  std::int64_t slot_bytes(std::int64_t micro_batch, std::int64_t local_seq) const;

 private:
  Status finish_unit(std::size_t u);                  // TP-sum of SP norm gradients, then post the reduce-scatter
  void bind(std::size_t l, fsdp::FlatUnit<T>& unit);  // block l to the unit's gathered weights
  // The head: the final norm, whose saved tensors are in the stage's storage S (T, or bf16 in a bf16
  // stage), and the vocab-parallel loss with its backward; one body over S, as the blocks have.
  void head_forward(tensor::Arena& a, std::int64_t n, State& st, const T* x);
  Status head_backward(tensor::Arena& a, std::int64_t n, State& st, T loss_scale, T* dx);
  template <typename S>
  void head_forward_in(tensor::Arena& a, std::int64_t n, State& st, const T* x);
  template <typename S>
  Status head_backward_in(tensor::Arena& a, std::int64_t n, State& st, T loss_scale, T* dx);
  Status after_backward(std::size_t u, bool last_of_step);

  model::LlamaConfig cfg_;
  ParallelContext ctx_;
  const kernels::Ops* ops_;  // ctx_.ops(): the run's device
  model::Recompute recompute_;
  std::vector<int> layers_;
  bool first_ = false, last_ = false, release_after_backward_ = true;
  nn::LayerSizes local_;
  tp::VocabShard vocab_;
  tp::TpCollectives<T>* tpc_ = nullptr;
  cp::CpAttentionHooks<T>* cph_ = nullptr;
  std::shared_ptr<const kernels::RopeTable<T>> rope_;
  std::vector<std::unique_ptr<fsdp::FlatUnit<T>>> units_;
  std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> norm_ranges_;  // per unit: [begin, end)
  std::vector<ShardedParam> params_;
  std::vector<nn::TransformerBlock<T>> blocks_;
  std::vector<kernels::Buffer> m_, v_;     // AdamW moments per unit shard, on the run's device
  int emb_ = -1, head_ = -1, layer0_ = 0;  // unit indices
};

}  // namespace herd::parallel
