// PipelineExecutor: runs one pipeline rank's action list from schedule/ verbatim.
//
// Each rank holds V model chunks (virtual stages r, r + PP, ...) and walks its list. A chunk is a
// DistributedStage (parallel/dist_stage.h: TP-local, FSDP-sharded over CP x DP, with the TP and CP
// hooks) built by the rank's model (parallel/rank_model.h), which is how the 4D runtime composes PP
// with the other axes; at degree 1 on TP, CP and DP it is the plain pipeline stage the pp tests
// compare with the single-rank model, and at pp = 1 one chunk holds the whole model. The
// executor builds the step's CP masks once (prepare_micro_batches) and selects the micro-batch's
// before each compute, tells each chunk which backward is its last of the step (FSDP reduce-scatters
// its units there) and waits for those reduce-scatters at the end of the step. The last chunk runs its
// head's backward inside the forward (the loss scale is known), so the logits are computed once. Boundary tensors are
// the chunk's local rows (n_loc, d): the CP-local rows, further cut over TP with sequence parallelism.
//   kRecv*     waits for a receive that was posted ahead: before each action the executor posts every
//              receive up to the compute action `recv_lookahead` computes later, so the data of the
//              next compute is usually in flight while the current one runs;
//   kForward   runs the chunk on the micro-batch into a slot arena of its own (stage 0 embeds tokens,
//              the last stage keeps the head's saved tensors and adds the micro-batch's loss);
//   kBackward  runs the chunk's backward from the received output gradient (the last stage: from the
//              loss, scale 1 / real tokens of the step) and frees the slot;
//   kSend*     posts an asynchronous send and keeps the handle; the buffer returns to the pool only
//              when the send has completed (tested after every action, waited at the end of the step).
// Memory. Saved activations of (micro-batch, chunk) live in a slot arena taken from a pool of
// check().peak_inflight[r] arenas (allocated once), so micro-batches free in schedule order although
// nn's arena is a stack. Boundary tensors (a stage's input, output and their gradients, (N, d) each)
// come from a free list and return to it as soon as no later action needs them. The peak of the
// slots' held bytes is measured after every forward and reported per step.
// Channels. The constructor exchanges one message with each neighbour on the ring in a fixed order
// (receives first, then sends), so backends that build connections lazily (NCCL, some MPIs) have them
// all before the first step instead of creating them in schedule order, which can deadlock.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "herd/core/aligned.h"
#include "herd/core/error.h"
#include "herd/model/config.h"
#include "herd/model/flops.h"
#include "herd/nn/batch.h"
#include "herd/parallel/context.h"
#include "herd/parallel/dist_stage.h"
#include "herd/parallel/pp/plan.h"
#include "herd/tensor/arena.h"

namespace herd::parallel::pp {

struct ExecutorOptions {
  std::int64_t micro_batch = 1;  // B: largest micro-batch (rows) the buffers are sized for
  std::int64_t seq_len = 0;      // T
  int recv_lookahead = 1;        // receives posted this many compute actions ahead
};

struct StepStats {
  double loss_sum = 0;      // over the step's real tokens (every pipeline rank gets it)
  std::int64_t tokens = 0;  // real tokens of the step
  double loss() const { return tokens ? loss_sum / static_cast<double>(tokens) : 0.0; }
  std::int64_t peak_activation_bytes = 0;  // most saved bytes this rank's slots held at once (measured)
  // Most bytes the slots held at once with the running pass's temporaries: the other in-flight slots'
  // saved bytes plus the running slot's peak during its forward or backward (measured).
  std::int64_t peak_working_bytes = 0;
  int peak_slots = 0;             // most (micro-batch, chunk) pairs in flight
  int peak_boundary_buffers = 0;  // most (N, d) boundary buffers alive at once
};

template <typename T>
class PipelineExecutor {
 public:
  using Stage = DistributedStage<T>;

  // Takes this rank's chunks of the plan (chunk c holds virtual stage pp_rank + c x PP's layers of
  // plan.layers) and opens the channels. pp must have plan's PP members; every pipeline rank calls
  // make() with the same plan.
  static Result<std::unique_ptr<PipelineExecutor>> make(comm::Communicator* pp, const model::LlamaConfig& cfg,
                                                        PipelinePlan plan, std::vector<Stage> chunks,
                                                        const ExecutorOptions& options);

  // One training step over spec.microbatches micro-batches (all ranks pass the same list; stage 0
  // reads tokens, the last stage targets). Gradients accumulate into the chunks' buffers: the caller
  // zeroes them first (zero_grads()). loss_scale: dLoss/d(token loss), by default 1 / the real tokens of
  // these micro-batches (a data-parallel caller passes 1 / the global step's).
  Result<StepStats> step(const std::vector<nn::MicroBatch>& micro_batches, std::optional<T> loss_scale = {});

  // One chunk holding the whole model (pp = 1): the forward of one micro-batch alone, for evaluation.
  // Returns its loss sum and real tokens with the gradients untouched, and with `logits` set, this TP
  // rank's vocabulary rows of the logits (rows, vocab / tp). Every unit is released after.
  Result<kernels::CrossEntropyLoss> forward_only(const nn::MicroBatch& mb, T* logits = nullptr);

  void zero_grads();
  int pp_rank() const { return rank_; }
  const PipelinePlan& plan() const { return plan_; }
  // This rank's chunks, chunk c = virtual stage rank + c * PP.
  std::vector<Stage>& chunks() { return chunks_; }
  // Activation slot i (its tags name the saved tensors, tensor/arena.h).
  const tensor::Arena& slot(int i) const { return *slots_[static_cast<std::size_t>(i)]; }
  // Bytes each chunk's slot held after its last forward (its saved activations, measured).
  const std::vector<std::int64_t>& chunk_saved_bytes() const { return chunk_saved_; }

 private:
  PipelineExecutor(comm::Communicator* pp, const model::LlamaConfig& cfg, PipelinePlan plan, std::vector<Stage> chunks,
                   const ExecutorOptions& options);
  Status open_channels();
  T* acquire_buffer();
  // The micro-batches as the chunks' blocks read them: positions and document ids copied to the chunks'
  // device (RoPE and the attention mask read them there, kept in batch_meta_ until the next call);
  // tokens and targets the host's, which the stage copies where it needs them.
  std::vector<nn::MicroBatch> on_device(const std::vector<nn::MicroBatch>& mbs);  // as given on the CPU
  void release_buffer(T* b);
  struct StepRun;  // one step's micro-batches in flight and its totals (executor.cpp)
  Status forward_action(StepRun& run, const schedule::Action& a);
  Status backward_action(StepRun& run, const schedule::Action& a, bool last_of_step);

  comm::Communicator* comm_;
  model::LlamaConfig cfg_;
  PipelinePlan plan_;
  ExecutorOptions opt_;
  int rank_, pp_, v_;
  std::vector<Stage> chunks_;
  std::vector<std::size_t> last_backward_;  // per chunk: index of its last backward in the action list
  std::vector<std::int64_t> chunk_saved_;
  std::vector<kernels::Buffer> slot_memory_;  // each slot's block, on the chunks' device
  std::vector<std::unique_ptr<tensor::Arena>> slots_;
  std::vector<int> free_slots_;
  std::vector<kernels::Buffer> buffers_;  // residual streams and their gradients, on the chunks' device
  kernels::Buffer batch_meta_;            // on_device's positions and document ids
  std::vector<T*> free_buffers_;
};

}  // namespace herd::parallel::pp
