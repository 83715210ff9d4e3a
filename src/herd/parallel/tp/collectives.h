// Tensor-parallel collectives of one rank: the f/g pair around a block's sharded regions, and the
// vocab-parallel embedding and cross-entropy.
//
// A transformer block alternates replicated regions (the norms and the residual) and TP regions (the
// column-parallel q/k/v and gate/up linears, attention over this rank's heads, the row-parallel o and
// down linears). TpCollectives implements nn::TensorParallelHooks for the two ways of crossing:
//   SP off: the norm regions hold all N = B x T rows on every TP rank; entering a TP region is free
//           (its adjoint is an all-reduce of the input gradient) and leaving it is an all-reduce.
//   SP on : the norm regions hold rows [r N/tp, (r+1) N/tp) of rank r; entering is an all-gather and
//           leaving a reduce-scatter (adjoints: reduce-scatter and all-gather). Same bytes on the wire
//           as one all-reduce, 1/tp of the norm activations (Korthikanti et al.).
// Rows are split over the flattened (B x T) index, so a shard is contiguous whatever B is.
//
// The vocabulary is split over TP by rows of the embedding and output tables: rank r owns tokens
// [r V/tp, (r+1) V/tp). The embedding is a masked lookup summed over ranks (the reduce above); the
// loss combines each rank's (max, sum-exp, target logit) per row with one all-gather, so no rank ever
// holds a logit outside its shard and every TP rank ends with the same loss, counted once.
//
// A failed collective makes the object sticky-failed: later collectives are skipped and the caller
// returns status() at the end of the step (the communicator has already dumped its flight recorder).
#pragma once

#include <cstdint>

#include "herd/comm/communicator.h"
#include "herd/kernels/cross_entropy.h"
#include "herd/kernels/ops.h"
#include "herd/nn/block.h"

namespace herd::parallel::tp {

template <typename T>
class TpCollectives final : public nn::TensorParallelHooks<T> {
 public:
  // ops: the op interface of the rank's device (kernels/ops.h): the copies of a group of one and the
  // vocab-parallel kernels below run through it. It outlives the collectives.
  TpCollectives(comm::Communicator& tp, bool sequence_parallel, const kernels::Ops& ops = kernels::cpu_ops())
      : tp_(&tp), sp_(sequence_parallel), ops_(&ops) {}

  std::int64_t local_rows(std::int64_t n) const override { return sp_ ? n / tp_->size() : n; }
  void gather(const T* local, T* full, std::int64_t n, std::int64_t cols) const override;
  void gather(const bf16* local, bf16* full, std::int64_t n, std::int64_t cols) const override;
  void reduce(const T* partial, T* local, std::int64_t n, std::int64_t cols) const override;

  // The adjoint-free reductions the model needs besides the pair: buf (count) summed over TP.
  void all_reduce(T* buf, std::int64_t count) const;
  void all_gather(const T* send, T* recv, std::int64_t count) const;

  int size() const { return tp_->size(); }
  int rank() const { return tp_->rank(); }
  bool sequence_parallel() const { return sp_; }
  const kernels::Ops& ops() const { return *ops_; }
  const Status& status() const { return status_; }

 private:
  void record(Status s) const {
    if (status_.ok() && !s.ok()) status_ = std::move(s);
  }
  comm::Communicator* tp_;
  bool sp_;
  const kernels::Ops* ops_;
  mutable Status status_;
};

// This rank's vocabulary rows: [begin, begin + rows).
struct VocabShard {
  std::int64_t begin = 0;
  std::int64_t rows = 0;
};
VocabShard vocab_shard(std::int64_t vocab, int tp_size, int tp_rank);

// x (local_rows(n), d) = embedding of ids (n) through this rank's table shard (rows, d), summed over
// TP. `full` is scratch (n, d).
template <typename T>
void vocab_embedding_forward(const TpCollectives<T>& c, const std::int32_t* ids, std::int64_t n, const T* table,
                             VocabShard shard, std::int64_t d, T* full, T* x);
// dtable += the shard's rows of the gradient; dx (local_rows(n), d); `full` is scratch (n, d).
template <typename T>
void vocab_embedding_backward(const TpCollectives<T>& c, const std::int32_t* ids, std::int64_t n, const T* dx,
                              VocabShard shard, std::int64_t d, T* full, T* dtable);

// The same from a bf16 table (a bf16 stage's gathered embedding unit); x stays fp32.
void vocab_embedding_forward(const TpCollectives<float>& c, const std::int32_t* ids, std::int64_t n, const bf16* table,
                             VocabShard shard, std::int64_t d, float* full, float* x);

// Vocab-parallel cross-entropy of h (n, d), all rows, against this rank's output shard w (rows, d):
// lse (n) written; dh (n, d) accumulates this shard's (partial over TP) input gradient and dw (rows, d)
// the weight gradient, both scaled by `scale` = dLoss/d(per-token loss). `stats` is scratch of
// 3 * n * (2 tp + 1) elements. The returned loss sum and count are over the n rows, equal on every TP rank.
// dh and dw both null: the loss and lse only (evaluation, a pipeline's forward), no gradient GEMMs.
template <typename T>
kernels::CrossEntropyLoss vocab_cross_entropy(const TpCollectives<T>& c, const T* h, std::int64_t n, std::int64_t d,
                                              const T* w, VocabShard shard, const std::int32_t* targets, T scale,
                                              T* lse, T* dh, T* dw, T* stats);
// The same with h and w in bf16 (logits, softmax statistics and gradients in fp32).
kernels::CrossEntropyLoss vocab_cross_entropy(const TpCollectives<float>& c, const bf16* h, std::int64_t n,
                                              std::int64_t d, const bf16* w, VocabShard shard,
                                              const std::int32_t* targets, float scale, float* lse, float* dh,
                                              float* dw, float* stats);

}  // namespace herd::parallel::tp
