// RankModel: one rank's share of a Llama 3 model in any TP x CP x PP x DP layout, and everything the
// trainer asks of it.
//
// A rank holds V chunks (virtual stages r, r + PP, ...; V = 1 without interleaving), each a
// DistributedStage (dist_stage.h): its layers' units as TP-local flat buffers, FSDP-sharded over the
// combined CP x DP group, with the TP collectives and (cp > 1) the CP attention hooks plugged into the
// single-rank blocks. A PipelineExecutor (pp/executor.h) runs the step's micro-batches through the
// chunks in the order of the schedule. pp = 1 is a pipeline of one chunk that holds every unit
// (embedding | layers | final norm + head) under the 1F1B order, which at one stage is forward then
// backward of each micro-batch in turn: there is no second model class for it.
//
// A step: zero_grads(); forward_backward_step(micro-batches, loss_scale) runs the rank's schedule
// (loss_scale = 1 / real tokens of the whole global step, so the summed gradients are those of the
// mean loss) and returns the loss sum and real-token count of this rank's (dp, cp) slice, the same on
// every TP and PP rank; each unit's gradient is reduce-scattered over CP x DP after the step's last
// backward of its chunk; grad_norm() (collective) then apply_update() clip by the global norm (every
// shard over TP with replicated norms once, CP x DP and PP) and apply AdamW to this rank's shards.
// Units are released after each backward at pp = 1 (the next micro-batch gathers them again, as ZeRO-3
// does); a pipeline keeps each chunk gathered across the step's micro-batches.
//
// Checkpoints see the rank's state as ShardPieces: for each named full tensor (rows, cols), the block
// [r0, r1) x [c0, c1) this rank's TP coordinate holds, and of that block (flattened row-major) the
// elements [e0, e1) this rank keeps after FSDP. Any layout is described this way, which is what lets a
// checkpoint written by one layout be read by another (train/checkpoint/checkpoint.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "herd/core/error.h"
#include "herd/kernels/cross_entropy.h"
#include "herd/kernels/optim.h"
#include "herd/model/config.h"
#include "herd/model/flops.h"
#include "herd/nn/batch.h"
#include "herd/parallel/context.h"
#include "herd/parallel/dist_stage.h"
#include "herd/parallel/pp/executor.h"
#include "herd/schedule/schedule.h"

namespace herd::parallel {

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

// What one rank holds, as the trainer reports it for "planned vs measured" (train/plan/projection.h).
struct RankMemoryUse {
  double state_bytes = 0;       // parameters, gradients, optimizer moments (allocated sizes)
  double arena_peak_bytes = 0;  // the activation slots' and boundary buffers' high-water mark
  // The saved activations alone at their peak (the executor measures them apart from the running
  // pass's temporaries); -1 where nobody measured them.
  double saved_activation_bytes = -1;
  // The rank thread's kernel scratch at the end of the run (kernels/scratch.h): the cross-entropy's
  // logits tile and attention's tiles, held outside the slots.
  double kernel_scratch_bytes = 0;
  // A GPU run: the most bytes the device's caching allocator handed out at once in this process (every
  // rank that shares the process's GPU), which is what the GPU must hold; -1 on the CPU.
  double device_peak_bytes = -1;
  double total() const { return state_bytes + arena_peak_bytes + kernel_scratch_bytes; }
  double activation_bytes() const { return arena_peak_bytes + kernel_scratch_bytes; }
};

struct RankModelOptions {
  model::Recompute recompute = model::Recompute::kSelective;
  std::int64_t micro_batch = 1;  // this rank's sequences per micro-batch
  std::int64_t seq_len = 0;      // the full sequence length (each rank holds seq_len / cp tokens of each)
  // pp, v, M (micro-batches per step), n and the kind. At pp = 1 only M matters: the one chunk runs
  // each micro-batch's forward and backward in turn.
  schedule::ScheduleSpec schedule;
  bool lighter_ends = true;  // first and last virtual stage one layer lighter (Llama 3)
  int recv_lookahead = 1;    // pipeline receives posted this many compute actions ahead
};

template <typename T>
class RankModel {
 public:
  using Stage = DistributedStage<T>;

  // Plans the pipeline (refusing a schedule or layer split that cannot run, one line), builds this
  // rank's chunks over ctx and opens the pipeline channels. Collective over ctx.pp; every rank passes
  // the same arguments.
  static Result<std::unique_ptr<RankModel>> make(const ParallelContext& ctx, const model::LlamaConfig& cfg,
                                                 const RankModelOptions& options);
  ~RankModel();

  const model::LlamaConfig& config() const { return cfg_; }
  std::vector<Stage>& chunks() { return ex_->chunks(); }
  pp::PipelineExecutor<T>& executor() { return *ex_; }
  // Elements of the full (nn::LlamaModel-layout) flat weight buffer.
  std::int64_t full_param_count() const { return full_count_; }

  // The same full weights the single-rank nn::LlamaModel<T>::init_weights(seed) makes; each rank
  // computes only its own shards (counter-based, nn/init.h).
  void init_weights(std::uint64_t seed);
  // Takes this rank's shards of full weights (nn::LlamaModel layout, full_param_count() elements).
  void load_full(const T* full);
  void zero_grads() { ex_->zero_grads(); }

  // Every micro-batch of the step through the rank's schedule; returns the summed loss and real tokens
  // of this rank's (dp, cp) slice. Gradients accumulate until apply_update.
  Result<kernels::CrossEntropyLoss> forward_backward_step(const std::vector<nn::MicroBatch>& mbs, T loss_scale);
  // The loss of the step's micro-batches without training on them (collective like the step): forward
  // only at pp = 1; a pipeline runs its training schedule with a loss scale of 0 (every gradient an
  // exact zero, cleared after).
  Result<kernels::CrossEntropyLoss> evaluate_step(const std::vector<nn::MicroBatch>& mbs);
  // pp = 1: the forward of one micro-batch and the logits of this TP rank's vocabulary rows, out
  // (rows, vocab / tp), fp32 (bf16 matmul inputs under bf16). Collective over TP and CP x DP.
  Status logits(const nn::MicroBatch& mb, T* out);

  // The global gradient norm (collective over TP, CP x DP and PP; replicated norms counted once),
  // then clipping by it (max_norm 0: none) and AdamW at rate lr on this rank's shards (local). A step
  // the trainer skips never calls apply_update: weights, moments and the step count stay as they were.
  Result<double> grad_norm();
  void apply_update(const kernels::AdamWConfig& cfg, double lr, double max_norm, double norm);
  Result<double> step(const kernels::AdamWConfig& cfg, double lr, double max_norm);
  std::int64_t optimizer_steps() const { return steps_; }
  void set_optimizer_steps(std::int64_t steps) { steps_ = steps; }

  // This rank's pieces of every named tensor (parameters and both AdamW moments). Replicated norms
  // are saved by TP rank 0 only (each element once) and loaded by every TP rank. The pointers are host
  // memory on every device: on a GPU the pieces are host copies of the shards (made by each call, valid
  // until the next call of the same function), and what a loader writes into load_pieces() reaches the
  // device in after_load().
  std::vector<ShardPiece<T>> shard_pieces() { return pieces(/*for_load=*/false); }
  std::vector<ShardPiece<T>> load_pieces() { return pieces(/*for_load=*/true); }
  // The master shards were overwritten from outside (a checkpoint): bf16 copies refresh at the next
  // gather.
  void after_load();
  // Parameters, gradients and optimizer state (each unit's gathered and shard buffers at their step
  // peak), and the measured peak of the activation slots and boundary buffers.
  RankMemoryUse memory_use();
  // Collective over the world: the full named weights (or reduced gradients, in one flat buffer), in
  // the single-rank model's order.
  Result<std::vector<std::pair<std::string, std::vector<T>>>> gather_full_weights();
  // The same as one flat buffer in nn::LlamaModel's layout: the weights, or with grads the reduced
  // gradients.
  Result<std::vector<T>> gather_full(bool grads);

 private:
  RankModel(const ParallelContext& ctx, const model::LlamaConfig& cfg, const RankModelOptions& options);
  std::vector<ShardPiece<T>> pieces(bool for_load);
  // Host copies of the pieces on a device (shard_pieces and load_pieces each own one), and where each
  // loaded piece goes back to.
  struct Staged {
    struct Copy {
      T* device;
      const T* host;
      std::int64_t count;
    };
    std::vector<T> host;
    std::vector<Copy> back;  // loaded arrays: what after_load() copies to the device
  };
  Staged saved_, loaded_;
  void stage_on_host(std::vector<ShardPiece<T>>& pieces, Staged& st, bool for_load);

  ParallelContext ctx_;
  model::LlamaConfig cfg_;
  RankModelOptions opt_;
  std::vector<model::Weight> table_;  // the full layout: names and offsets in the flat buffer
  std::int64_t full_count_ = 0;
  // Shared by the chunks, which hold pointers to them: declared before the executor that owns them.
  std::unique_ptr<tp::TpCollectives<T>> tpc_;
  std::unique_ptr<cp::CpAttentionHooks<T>> cph_;  // cp > 1 only
  std::shared_ptr<const kernels::RopeTable<T>> rope_;
  std::unique_ptr<pp::PipelineExecutor<T>> ex_;
  std::int64_t steps_ = 0;
  std::int64_t peak_activation_bytes_ = 0, peak_working_bytes_ = 0, peak_boundary_bytes_ = 0;
  std::int64_t boundary_bytes_ = 0;  // one (rows, d) boundary buffer
};

}  // namespace herd::parallel
