// One FSDP unit: a flat range of parameters (a layer, the embedding, or the final norm + head) sharded
// over the data-parallel group, with the unit's gather, release and gradient reduce-scatter.
//
// The unit's `count` elements (this TP rank's part of the layer) are padded to a multiple of dp and
// cut into dp equal shards; DP rank r owns [r S, (r+1) S) with S = ceil(count / dp). The shard is the
// master copy the optimizer updates. Before the unit's forward, the full flat buffer is all-gathered
// (asynchronously, so the model can prefetch the next unit while computing this one); after its last
// use it is released. Gradients accumulate in a full-size buffer across the micro-batches of a step
// and are reduce-scattered (summed over DP) into the gradient shard once, posted after the unit's
// backward of the step's last micro-batch and completed at the end of that backward pass: one reduce-scatter per unit
// per step whatever the accumulation count, and a result that does not depend on how the step was split. The padding is
// zero and stays zero.
//
// A group of one (dp = 1, the one-rank layout) uses its shard in place: full_params() is the shard,
// full_grads() accumulates into the gradient shard, and neither the gather nor the reduce-scatter
// copies anything.
//
// bf16 compute (`train.precision = bf16`, T = float, the paper's recipe): the shard stays the fp32
// master copy the optimizer updates, and what is gathered is its bf16 copy: each gather rounds this
// rank's shard into its place in a bf16 buffer of the whole unit and all-gathers in place, half the
// bytes of an fp32 gather (full_params_bf16()). A group of one keeps one bf16 copy of the unit instead,
// refreshed at the first gather after params_updated(). Gradients are untouched by this: they
// accumulate in the fp32 full buffer across micro-batches and are reduce-scattered in fp32.
//
// Bytes per unit per step with P = count x sizeof(T) (x 1/2 for the bf16 gathers): all-gather
// (dp-1)/dp P sent per rank per gather (one per forward, plus one per backward when resharded after
// forward), reduce-scatter (dp-1)/dp P.
#pragma once

#include <cstdint>
#include <string>

#include "herd/comm/communicator.h"
#include "herd/core/aligned.h"
#include "herd/core/bf16.h"
#include "herd/core/error.h"
#include "herd/kernels/ops.h"

namespace herd::parallel::fsdp {

template <typename T>
class FlatUnit {
 public:
  // gather_bf16: gather bf16 copies of the fp32 shards (T = float only). keep_buffers: release() and
  // wait_grads() keep the full buffers for the next step (below); false frees them, for a unit resharded
  // after forward (ZeRO-3), whose point is not to hold every unit's gathered weights at once.
  // ops: the op interface of the device that holds the unit's buffers (kernels/ops.h); it outlives the unit.
  FlatUnit(std::string name, std::int64_t count, comm::Communicator& dp, bool gather_bf16 = false,
           bool keep_buffers = true, const kernels::Ops& ops = kernels::cpu_ops());
  // Waits for any op still in flight (an error path may leave one) before its buffers go.
  ~FlatUnit();
  FlatUnit(const FlatUnit&) = delete;
  FlatUnit& operator=(const FlatUnit&) = delete;

  const std::string& name() const { return name_; }
  std::int64_t count() const { return count_; }        // unpadded elements of the unit
  std::int64_t shard_size() const { return shard_; }   // S
  std::int64_t shard_begin() const { return begin_; }  // r S, in unit elements
  std::int64_t padded() const { return shard_ * dp_->size(); }
  // A group of one: the full buffers are the shards (no second copy of the weights or gradients).
  bool in_place() const { return in_place_; }
  bool bf16_gather() const { return bf16_; }

  T* shard_params() { return params_.as<T>(); }  // (S) master weights
  T* shard_grads() { return grads_.as<T>(); }    // (S) reduced gradients of the step
  const T* shard_params() const { return params_.as<T>(); }
  const T* shard_grads() const { return grads_.as<T>(); }

  // Posts the all-gather of the full parameters (no-op when gathered or in flight).
  void begin_gather();
  // Waits for it (posting it first if needed); then full_params() is valid.
  Status wait_gather();
  bool gathered() const { return held_ && !in_flight_; }
  // (padded) The gathered weights: the fp32 ones, or under bf16 (full_params() is then null) their bf16
  // copy; null when not gathered.
  T* full_params() { return bf16_ || !held_ ? nullptr : in_place_ ? params_.as<T>() : full_.as<T>(); }
  const bf16* full_params_bf16() const { return bf16_ && held_ ? full_h_.as<bf16>() : nullptr; }
  // Ends the use of the full parameters: full_params() is null until the next gather. With keep_buffers
  // the buffer itself is kept for that gather, as PyTorch's caching allocator keeps a freed block: without
  // resharding the step holds every unit's gathered weights and gradients at its peak anyway
  // (step_peak_bytes), and a buffer freed and allocated again each step came back from the kernel as
  // fresh pages, zeroed on first touch (11-21% of the cp2 x dp2 step on two cores went to zeroing them).
  void release();
  // The master shard changed (optimizer step, initialisation, a checkpoint load): the next bf16 gather
  // rounds it into its own place (a gather into a new buffer always does).
  void params_updated() { stale_ = true; }
  // bf16 gathers whose buffer outlives the step (a group of one, or keep_buffers): this shard's own
  // place in it, where the optimizer may write the new weights rounded as it updates them; else null.
  bf16* shard_params_bf16();
  // The master shard changed and shard_params_bf16() holds its rounding: the next gather skips it.
  void params_updated_rounded() { stale_ = false; }
  // Bytes the unit holds at its peak inside a step: the gathered weights and full gradient buffer (none
  // in a group of one, except its bf16 copy) and the shard's master weights, reduced gradients and both
  // AdamW moments (which the owner allocates; counted here so every owner counts alike).
  double step_peak_bytes() const;

  // The full gradient buffer of this step (padded), zeroed at its first use after zero_grads() or
  // wait_grads() (the buffer is kept across steps, like the gathered weights).
  T* full_grads();
  // Posts grads shard = sum over DP of the full gradient buffers (once per step), asynchronous so it
  // overlaps the next unit's backward; wait_grads() completes it, and the next full_grads() starts from zero.
  void begin_reduce_scatter_grads();
  Status wait_grads();
  void zero_grads();  // the shard and the accumulation buffer

 private:
  std::string name_;
  std::int64_t count_, shard_, begin_;
  comm::Communicator* dp_;
  const kernels::Ops* ops_;
  kernels::Buffer params_, grads_, full_, full_grads_;
  kernels::Buffer full_h_;  // bf16: the gathered copy (padded), or a group of one's copy (count)
  comm::Handle handle_, grad_handle_;
  bool in_flight_ = false, grads_in_flight_ = false;
  bool grads_valid_ = false;  // full_grads_ is zeroed and accumulating this step's gradients
  bool in_place_ = false;     // a group of one: the shard is the full buffer
  bool held_ = false;         // this use's full weights are there (or in flight): the shard itself, full_ or full_h_
  bool bf16_ = false, stale_ = true;
  bool keep_ = true;  // keep_buffers
};

}  // namespace herd::parallel::fsdp
