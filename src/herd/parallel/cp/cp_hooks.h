// CpAttentionHooks: context-parallel attention plugged into nn::TransformerBlock.
//
// A block under CP holds, for each sequence of its micro-batch, the 2 chunks of this CP rank
// (cp_attention.h's split, the rows data::slice_batch cuts), so every row-local op (norms, linears,
// RoPE on the tokens' global positions, the loss) is the single-rank code on fewer rows; only attention
// needs the other ranks' keys. This hook replaces the block's attention kernel with
// cp_attention_forward/backward under one CpMask per micro-batch (set_micro_batch builds it with one
// small all-gather and every layer reuses it) and one workspace reused by every layer and step. A
// pipeline rank interleaves micro-batches, so set_micro_batches builds the masks of a whole step at
// once and select() picks the one of the micro-batch about to run.
//
// Errors of the CP collectives are sticky, like tp::TpCollectives: the first is kept, later calls do
// nothing, and the model returns status() after the pass.
#pragma once

#include <cstdint>
#include <vector>

#include "herd/comm/communicator.h"
#include "herd/nn/batch.h"
#include "herd/nn/block.h"
#include "herd/parallel/cp/cp_attention.h"

namespace herd::parallel::cp {

template <typename T>
class CpAttentionHooks final : public nn::AttentionHooks<T> {
 public:
  // ops: the op interface of the rank's device (kernels/ops.h), which holds the workspaces and runs the
  // attention kernels and copies; it outlives the hooks.
  explicit CpAttentionHooks(comm::Communicator& cp, const kernels::Ops& ops = kernels::cpu_ops())
      : cp_(&cp), ws_(ops), ws_bf16_(ops) {}

  // mb: this rank's slice (B, 2c) of a micro-batch of sequences of cp x 2c tokens. Collective over CP.
  // Builds its mask and selects it.
  Status set_micro_batch(const nn::MicroBatch& mb);
  // The masks of every micro-batch of a step (collective over CP, in order); select(i) picks one.
  Status set_micro_batches(const std::vector<nn::MicroBatch>& mbs);
  void select(std::size_t i) {
    HERD_CHECK(i < masks_.size(), "CP mask ", i, " of ", masks_.size());
    cur_ = &masks_[i];
  }

  void forward(const kernels::AttentionDims& d, const T* q, const T* k, const T* v, T* out, T* lse) const override;
  void backward(const kernels::AttentionDims& d, const T* q, const T* k, const T* v, const T* out, const T* lse,
                const T* dout, T* dq, T* dk, T* dv) const override;
  // bf16 mode (T = float): K and V gathered in bf16, the bf16 kernel, dK/dV reduce-scattered in fp32.
  void forward(const kernels::AttentionDims& d, const bf16* q, const bf16* k, const bf16* v, float* out,
               float* lse) const override;
  void backward(const kernels::AttentionDims& d, const bf16* q, const bf16* k, const bf16* v, const bf16* out,
                const float* lse, const float* dout, float* dq, float* dk, float* dv) const override;

  const CpMask& mask() const { return *cur_; }
  const Status& status() const { return status_; }

 private:
  void record(Status s) const {
    if (status_.ok() && !s.ok()) status_ = std::move(s);
  }
  comm::Communicator* cp_;
  std::vector<CpMask> masks_;  // grows to the step's micro-batch count, then is reused
  const CpMask* cur_ = nullptr;
  mutable CpWorkspace<T> ws_;
  mutable CpWorkspace<float> ws_bf16_;  // the bf16 path's (allocated only when it runs)
  mutable Status status_;
};

}  // namespace herd::parallel::cp
