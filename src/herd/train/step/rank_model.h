// RankModel: what the distributed trainer needs from the model of one rank.
//
// The trainer (trainer.h) owns the data path, the loss bookkeeping, the learning-rate schedule
// and checkpoints; the model of one rank owns its parameters (a TP shard, further split by FSDP), the
// collectives that make its gradients those of the whole global batch, and the optimizer step on its
// shard. This narrow interface keeps the two apart, so the TP+FSDP model (parallel/model.h) and the
// plain data-parallel stand-in of the tests plug in the same way.
//
// Checkpoints see a rank's state as ShardPieces: for each named full tensor (rows, cols), the block
// [r0, r1) x [c0, c1) this rank's TP coordinate holds, and of that block (flattened row-major) the
// elements [e0, e1) this rank keeps after FSDP. A piece points at the rank's parameter, first-moment
// and second-moment storage for those elements. Any TP x DP layout can be described this way, which
// is what lets a checkpoint written by one layout be read by another (checkpoint.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "herd/core/error.h"
#include "herd/kernels/cross_entropy.h"
#include "herd/kernels/optim.h"
#include "herd/nn/batch.h"
#include "herd/train/step/memory_use.h"

namespace herd::train {

template <typename T>
struct ShardPiece {
  std::string name;                             // "layers.3.wq", the single-rank model's name
  std::int64_t rows = 0, cols = 1;              // the full tensor
  std::int64_t r0 = 0, r1 = 0, c0 = 0, c1 = 0;  // the TP block
  std::int64_t e0 = 0, e1 = 0;                  // the FSDP range inside the block, row-major
  T* param = nullptr;                           // e1 - e0 elements each
  T* m = nullptr;
  T* v = nullptr;
  T* g = nullptr;  // the step's reduced gradient of the same elements (the NaN guard reads it)
  std::int64_t count() const { return e1 - e0; }
};

template <typename T>
class RankModel {
 public:
  virtual ~RankModel() = default;

  // The same full weights the single-rank nn::LlamaModel<T>::init_weights(seed) makes.
  virtual void init_weights(std::uint64_t seed) = 0;
  virtual void zero_grads() = 0;
  // Forward and backward of this rank's slice of one global micro-batch; loss_scale = 1 / (real tokens
  // of the whole global step). Returns the loss sum and real-token count of this rank's (dp, cp) slice,
  // the same on every TP rank. Gradients accumulate until step(); last_micro_batch marks the step's last
  // call (FSDP reduce-scatters each unit's gradient right after that backward).
  virtual Result<kernels::CrossEntropyLoss> forward_backward(const nn::MicroBatch& mb, T loss_scale,
                                                             bool last_micro_batch) = 0;
  // Every micro-batch of the step at once, returning their summed loss and count (a pipeline
  // interleaves them); by default forward_backward on each in order.
  virtual Result<kernels::CrossEntropyLoss> forward_backward_step(const std::vector<nn::MicroBatch>& mbs,
                                                                  T loss_scale) {
    kernels::CrossEntropyLoss total;
    for (std::size_t k = 0; k < mbs.size(); ++k) {
      HERD_ASSIGN_OR_RETURN(kernels::CrossEntropyLoss r, forward_backward(mbs[k], loss_scale, k + 1 == mbs.size()));
      total.loss_sum += r.loss_sum;
      total.count += r.count;
    }
    return total;
  }
  // The loss of the step's micro-batches without training on them (evaluation); collective like
  // forward_backward_step. By default the training path with a loss scale of 0 (every gradient an exact
  // zero, cleared after); a model with a forward-only path overrides it.
  virtual Result<kernels::CrossEntropyLoss> evaluate_step(const std::vector<nn::MicroBatch>& mbs) {
    HERD_ASSIGN_OR_RETURN(kernels::CrossEntropyLoss r, forward_backward_step(mbs, T(0)));
    zero_grads();
    return r;
  }
  // The optimizer step in two halves, so the trainer can look at the norm before anything changes (the
  // NaN guard skips a step with a non-finite norm): grad_norm() reduces the gradients across ranks where
  // that is still to do and returns the global gradient norm (collective; the same on every rank);
  // apply_update() clips by that norm (max_norm 0: no clipping) and applies AdamW at rate lr to this
  // rank's shard (local). A step that is skipped never calls apply_update: weights, moments and the
  // optimizer's step count stay as they were.
  virtual Result<double> grad_norm() = 0;
  virtual Status apply_update(const kernels::AdamWConfig& cfg, double lr, double max_norm, double norm) = 0;
  // Both halves; returns the global gradient norm before clipping.
  Result<double> step(const kernels::AdamWConfig& cfg, double lr, double max_norm) {
    HERD_ASSIGN_OR_RETURN(const double norm, grad_norm());
    HERD_RETURN_IF_ERROR(apply_update(cfg, lr, max_norm, norm));
    return norm;
  }
  virtual std::int64_t optimizer_steps() const = 0;
  virtual void set_optimizer_steps(std::int64_t steps) = 0;
  // This rank's pieces of every named tensor (parameters and both AdamW moments).
  virtual std::vector<ShardPiece<T>> shard_pieces() = 0;
  // The pieces a checkpoint load fills: by default the same; a model that keeps a full replica may ask
  // for whole tensors instead.
  virtual std::vector<ShardPiece<T>> load_pieces() { return shard_pieces(); }
  // Called after pieces were overwritten from a checkpoint (a model that caches gathered weights
  // refreshes them here).
  virtual Status after_load() { return Status::Ok(); }
  // Bytes this rank holds (parameters, gradients, optimizer state; activation arena peak); zeros when
  // the model does not say (test stand-ins).
  virtual RankMemoryUse memory_use() { return {}; }
  // Collective over the world: the full named weights, in the single-rank model's order.
  virtual Result<std::vector<std::pair<std::string, std::vector<T>>>> gather_full_weights() = 0;
};

}  // namespace herd::train
