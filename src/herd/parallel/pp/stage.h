// StageModule: the layers of one virtual pipeline stage, with a forward and backward per micro-batch.
//
// A stage holds the transformer layers schedule::assign_layers gives it, plus the token embedding on
// virtual stage 0 and the final norm, output head and loss on the last one. Its parameters and
// gradients are one flat buffer each, laid out as the matching units of nn::LlamaModel's flat buffer
// (embedding | layers.i ... | head), and units() says where each unit sits in both, so the
// single-rank model's weights can be copied in and gradients compared unit by unit.
//
// Each in-flight micro-batch keeps its saved tensors in an arena of its own (the executor's slot), so
// micro-batches can be freed in any order although nn's arena is a stack: inside one slot the layers
// release in reverse, as they must. The saved set is exactly model/activations.h's: the embedding's
// token ids on stage 0, each layer's list, and the head's list on the last stage.
// Legend: N = B x T rows, d hidden.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "herd/core/aligned.h"
#include "herd/core/error.h"
#include "herd/kernels/cross_entropy.h"
#include "herd/kernels/rope.h"
#include "herd/model/config.h"
#include "herd/model/flops.h"
#include "herd/nn/batch.h"
#include "herd/nn/block.h"
#include "herd/tensor/arena.h"

namespace herd::parallel::pp {

// One flat unit of this stage: `count` elements at `local` in the stage buffer and at `global` in
// nn::LlamaModel's buffer.
struct StageUnit {
  std::string name;  // "embedding", "layers.3", "head"
  std::int64_t local = 0;
  std::int64_t global = 0;
  std::int64_t count = 0;
};

// What one micro-batch keeps from a stage's forward until its backward (pointers into its slot arena).
template <typename T>
struct StageState {
  std::int32_t* ids = nullptr;  // embedding.ids (N), stage 0 only
  std::vector<nn::BlockState<T>> blocks;
  tensor::Arena::Mark head_mark;    // the arena before the head's saved tensors
  T* fin_in = nullptr;              // final_norm.input (N, d)
  T* fin_rstd = nullptr;            // final_norm.rstd (N)
  T* fin_out = nullptr;             // final_norm.output (N, d)
  T* lse = nullptr;                 // loss.lse (N)
  std::int32_t* targets = nullptr;  // loss.targets (N)
  kernels::CrossEntropyLoss loss;   // last stage: this micro-batch's loss sum and real tokens
};

template <typename T>
class StageModule {
 public:
  using State = StageState<T>;

  // layers: global layer indices of this virtual stage (consecutive); first/last: whether it holds the
  // embedding / the head. The rope table is shared by the chunks of a rank.
  StageModule(const model::LlamaConfig& cfg, model::Recompute recompute, std::vector<int> layers, bool first, bool last,
              std::shared_ptr<const kernels::RopeTable<T>> rope);

  bool first() const { return first_; }
  bool last() const { return last_; }
  const std::vector<int>& layers() const { return layers_; }
  std::int64_t param_count() const { return n_params_; }
  T* params() { return params_.get(); }
  const T* params() const { return params_.get(); }
  T* grads() { return grads_.get(); }
  const T* grads() const { return grads_.get(); }
  const std::vector<StageUnit>& units() const { return units_; }
  void zero_grads();

  // Copies this stage's units from / to a buffer laid out as nn::LlamaModel's.
  void load_params(const T* full);
  void store(const T* local, T* full) const;

  // x (N, d): the stage input (ignored on stage 0, which embeds mb.tokens into it), replaced by the
  // stage output (the last stage: the final residual; the loss is in the returned state).
  StageState<T> forward(tensor::Arena& slot, const nn::MicroBatch& mb, T* x) const;
  // dx (N, d): on entry dLoss/d(output) (ignored on the last stage, which starts from the loss with
  // loss_scale = 1 / real tokens of the step); on exit dLoss/d(input) (stage 0: consumed by the
  // embedding). Accumulates the weight gradients and frees everything `st` holds in `slot`.
  void backward(tensor::Arena& slot, const nn::MicroBatch& mb, StageState<T>& st, T loss_scale, T* dx) const;

  // The executor's hooks for distributed stages; nothing to do on one rank of TP = CP = DP = 1.
  std::int64_t boundary_rows(std::int64_t n) const { return n; }
  Status prepare_micro_batches(const std::vector<nn::MicroBatch>&) { return Status::Ok(); }
  void select_micro_batch(int) {}
  Status wait_grads() { return Status::Ok(); }

  // Arena bytes one slot needs for this stage: the saved tensors plus one layer's backward scratch.
  std::int64_t slot_bytes(std::int64_t micro_batch, std::int64_t seq_len) const;

 private:
  model::LlamaConfig cfg_;
  model::Recompute recompute_;
  std::vector<int> layers_;
  bool first_, last_;
  std::int64_t n_params_ = 0;
  std::int64_t emb_ = -1, head_ = -1;  // local offsets of the embedding and the head units
  AlignedPtr<T> params_, grads_;
  std::vector<StageUnit> units_;
  std::vector<nn::TransformerBlock<T>> blocks_;
  std::shared_ptr<const kernels::RopeTable<T>> rope_;
};

}  // namespace herd::parallel::pp
