// The single-rank Llama 3 model: token embedding, L transformer blocks, final RMSNorm, untied output
// head and the mean cross-entropy over real tokens, with an explicit forward and backward.
//
// Parameters live in one flat buffer made of per-layer units (embedding | layer 0 | ... | layer L-1 |
// final norm + output), gradients in a second buffer of the same layout, so AdamW, clipping and
// checkpoints see one span and FSDP can later shard unit by unit. Activations come from one arena
// sized from model/activations.h (the same functions the planner uses) for the largest micro-batch the
// model is built for, plus the scratch of one layer's backward; a step allocates nothing else.
// forward_backward accumulates gradients (+=), so micro-batches of one step add up; the caller zeroes
// the gradient buffer at the start of each step.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "herd/core/aligned.h"
#include "herd/kernels/cross_entropy.h"
#include "herd/kernels/ops.h"
#include "herd/kernels/rope.h"
#include "herd/model/config.h"
#include "herd/model/flops.h"
#include "herd/model/weights.h"
#include "herd/nn/batch.h"
#include "herd/nn/block.h"
#include "herd/tensor/arena.h"

namespace herd::nn {

// One named weight inside the flat buffer; shape is (out, in) for matrices, (n) for norms. The list
// is model::llama_weights (model/weights.h), the one weight table.
struct NamedParam {
  std::string name;  // "tok_embedding", "layers.3.wq", "final_norm", "output"
  std::int64_t offset = 0;
  std::int64_t rows = 0;
  std::int64_t cols = 1;
  std::int64_t count() const { return rows * cols; }
  bool is_norm() const { return cols == 1; }
};

// The RoPE table configuration of a model: theta, Llama 3.1 frequency scaling and herd's half-split
// pair layout. Every rank's model (single-rank, TP+FSDP, pipeline stages) builds its table from this.
kernels::RopeConfig rope_config(const model::LlamaConfig& cfg);

// Arena bytes a model needs for micro-batches of up to (micro_batch, seq_len): the activation lists
// of model/activations.h plus the residual streams and one layer's backward scratch.
std::int64_t model_arena_bytes(const model::LlamaConfig& cfg, std::int64_t micro_batch, std::int64_t seq_len,
                               model::Recompute recompute, std::int64_t element_bytes);

template <typename T>
class LlamaModel {
 public:
  // Sized for micro-batches of at most (micro_batch, seq_len); seq_len <= cfg.max_seq_len.
  LlamaModel(const model::LlamaConfig& cfg, model::Recompute recompute, std::int64_t micro_batch, std::int64_t seq_len);

  const model::LlamaConfig& config() const { return cfg_; }
  std::int64_t param_count() const { return n_params_; }
  T* params() { return params_.get(); }
  const T* params() const { return params_.get(); }
  T* grads() { return grads_.get(); }
  const std::vector<NamedParam>& named_params() const { return named_; }
  const NamedParam& param(const std::string& name) const;  // HERD_CHECK when unknown
  tensor::Arena& arena() { return *arena_; }
  // The largest micro-batch the arena was sized for.
  std::int64_t sized_rows() const { return max_rows_; }
  std::int64_t sized_seq_len() const { return max_seq_; }

  // Llama-style initialisation from a seed, per the weight table's init kinds (model/weights.h):
  // matrices N(0, 0.02), the residual-output projections (wo, w_down) N(0, 0.02 / sqrt(2 L)), the
  // embedding N(0, 1), the output head N(0, 1/sqrt(d)), norms 1. Weight i draws from stream i.
  void init_weights(std::uint64_t seed);
  void zero_grads();

  // Forward and backward of one micro-batch. loss_scale is dLoss/d(per-token loss): 1 / (real tokens of
  // the whole step) for the mean over the step. Returns the loss sum and the real-token count.
  kernels::CrossEntropyLoss forward_backward(const MicroBatch& mb, T loss_scale);
  // Forward only (evaluation).
  kernels::CrossEntropyLoss evaluate(const MicroBatch& mb);
  // Logits (N, V) of every position.
  void logits(const MicroBatch& mb, T* out);

 private:
  // Embedding and blocks; x (N, d) holds the final residual. Keeps the block states when `train`.
  void forward_blocks(const MicroBatch& mb, T* x, std::vector<BlockState<T>>* states);
  void check_batch(const MicroBatch& mb) const;
  // Forward without saving: embedding, blocks and the final norm; returns the normed hidden states
  // (N, d), allocated in the arena (the caller resets it to its mark).
  const T* forward_final_hidden(const MicroBatch& mb);

  // The reference model's memory is the host's, so its kernels are the CPU's op interface.
  const kernels::Ops& ops_ = kernels::cpu_ops();
  model::LlamaConfig cfg_;
  model::Recompute recompute_;
  std::int64_t max_rows_ = 0, max_seq_ = 0;
  std::int64_t n_params_ = 0;
  std::int64_t emb_ = 0, final_norm_ = 0, output_ = 0;  // offsets
  AlignedPtr<T> params_, grads_;
  std::vector<NamedParam> named_;
  std::vector<model::WeightUnit> units_;  // embedding, layers.0 .. layers.{L-1}, head
  std::vector<TransformerBlock<T>> blocks_;
  std::unique_ptr<kernels::RopeTable<T>> rope_;
  std::unique_ptr<tensor::Arena> arena_;
};

}  // namespace herd::nn
