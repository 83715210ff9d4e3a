// The trainer: one training loop for every layout, one rank included (a layout of size one).
//
// Every rank runs the same loader over the same documents, so every rank sees the same global batch
// whatever the layout: a step is train.global_batch sequences read as M global micro-batches of
// dp x microbatch_size sequences each, and data::slice_batch cuts this rank's (dp, cp) rows from each
// (TP and PP ranks of one slice get the same rows). The step's real-token count is taken from the
// global batch itself, so each rank scales its gradients by 1 / (real tokens of the global step) with
// no communication, and the loss reported is sum(loss over every rank's slice) / that count, summed
// over the DP and CP groups (every pipeline rank has its slice's loss): each token counted once. The
// summed count of the slices is checked against the global count on every step, so a slicing bug
// that drops or doubles a token stops the run instead of training on.
//
// Around the step, the same for every layout: the learning-rate schedule and the paper's batch ramp
// (section 3.4.1: half the micro-batch at half the length, then half at full length), held-out
// evaluation over eval.batches global batches (a one-pass loader; the same sequences whatever the
// layout), MFU, the metrics file and the progress line on rank 0, checkpoints (checkpoint.h:
// written by every rank from a host snapshot on a background thread, checkpoint_writer.h; readable by
// any layout, with checkpoint.fallback), and injected faults (fault.* in the config). Once per step,
// between the gradient norm and the update, the ranks all-reduce a small control vector (a preemption
// signal, a non-finite loss or norm, a failed save) so that all of them take the same decision: stop
// after a checkpoint (preempt.h), skip the update or stop (the NaN/Inf guard, train.nonfinite), follow
// checkpoint.on_error. docs/checkpoints.md.
// A checkpoint holds the weights, both AdamW moments, the optimizer step, the tokens seen and the
// loader's position; there is no other randomness in a step, so a resumed run continues bit for bit.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "herd/comm/flight_recorder.h"
#include "herd/comm/stragglers.h"
#include "herd/data/loader.h"
#include "herd/data/shard.h"
#include "herd/measure/comm_timer.h"
#include "herd/model/config.h"
#include "herd/parallel/context.h"
#include "herd/parallel/rank_model.h"
#include "herd/train/checkpoint/checkpoint_lock.h"
#include "herd/train/checkpoint/checkpoint_writer.h"
#include "herd/train/job/config.h"
#include "herd/train/step/lr_schedule.h"
#include "herd/train/step/metrics.h"
#include "herd/train/step/micro_batch_data.h"
#include "herd/train/step/step_hooks.h"
#include "herd/train/step/straggler_monitor.h"

namespace herd::train {

struct StepRecord {
  std::int64_t step = 0;  // 1-based: the number of optimizer steps done
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  std::int64_t tokens = 0;  // cumulative tokens processed
  double tokens_per_s = 0;
  double mfu = 0;
  double comm_wait_s = -1;  // this rank's time blocked in collectives during the step; -1: not measured
  double step_s = 0;        // the step's wall time
  // comm_wait_s by the kind of group (measure::GroupKind: tp, cp, pp, dp, other), where measured.
  std::optional<std::array<double, measure::kGroupKinds>> comm_by_kind_s;
  double optimizer_s = -1;  // the update's wall time (clipping and AdamW on this rank's shards); -1: skipped
  std::optional<double> val_loss;
  double checkpoint_s = -1;                 // the step's critical-path seconds spent on a checkpoint; -1: none
  bool skipped = false;                     // the NaN guard skipped the update (a non-finite loss or gradient norm)
  std::string nonfinite;                    // where the non-finite values were: the tensor groups, or "loss"
  bool straggler_check = false;             // the ranks' busy times were compared at this step
  std::vector<comm::Straggler> stragglers;  // what that check flagged (straggler_monitor.h)
};

// The model the config names (a preset or config.json, with model.vocab applied) checked against the
// data: a sequence longer than the model allows is an error naming data.seq_len.
Result<model::LlamaConfig> resolve_model_config(const TrainConfig& cfg, std::int64_t data_vocab);

// Entropy of the token frequencies (nats/token): the loss of the best model that ignores context.
double unigram_entropy(const data::TokenDocuments& docs);

template <typename T>
class Trainer {
 public:
  // val_docs may be empty (no evaluation). Resumes from the newest checkpoint in checkpoint.dir when
  // checkpoint.resume and one exists. Collective: every rank calls it.
  // layout: the config's, resolved and checked against the model and the world (train/job/job.h).
  static Result<std::unique_ptr<Trainer>> make(const TrainConfig& cfg, const ResolvedLayout& layout,
                                               const model::LlamaConfig& model_cfg,
                                               const parallel::ParallelContext& ctx,
                                               std::unique_ptr<parallel::RankModel<T>> model,
                                               std::shared_ptr<const data::TokenDocuments> train_docs,
                                               std::shared_ptr<const data::TokenDocuments> val_docs);

  // Runs until train.steps, or until step stop_after (> 0), with a checkpoint there when checkpoint.dir
  // is set, or until a preemption (preempt.h): then it saves a checkpoint, waits for it and returns Ok
  // with preempted() true. Collective: every rank calls it.
  Status run(std::int64_t stop_after = 0);
  // Saves a checkpoint of the current step and waits until it is written (collective).
  Status save_checkpoint();
  bool preempted() const { return preempted_; }
  // Mean loss over eval.batches global batches of the held-out split (NaN without one). Collective.
  Result<double> evaluate();

  std::int64_t step() const { return step_; }
  std::int64_t resumed_from() const { return resumed_from_; }
  const std::vector<StepRecord>& history() const { return history_; }
  parallel::RankModel<T>& model() { return *model_; }
  bool quiet = false;             // no progress or projection lines (tests; ranks other than 0)
  double step_seconds_total = 0;  // wall time of the steps run so far (benchmarks)
  // The source of each step's split (straggler_monitor.h); run_rank sets measured_step_clock over the
  // launcher's TimedCommunicator. When set, every StepRecord carries its step's wait in collectives (the
  // measured exposed communication) and the straggler watch and the flight recorder its step's split.
  // Unset, fault.slow_rank's extra work runs on a measured clock without collectives and nothing else
  // is recorded.
  std::unique_ptr<StepClock> step_clock;
  // When set, called at each step with what the rank is doing ("step 12"): the rank's heartbeat, which
  // the watchdog reads (train/job/watchdog.h). run_rank points it at the world's flight recorder.
  std::function<void(const std::string&)> heartbeat;
  // When set, the rank's flight recorder (comm/flight_recorder.h): each step's busy and wait seconds are
  // noted in it (its dumps carry them, for `herd trace`), and every diagnostics.dump_every steps it is
  // dumped. run_rank points it at the world's recorder.
  std::shared_ptr<comm::FlightRecorder> recorder;
  // When set, this rank's seconds in collectives so far by kind of group: run_rank points it at the
  // launcher's TimedCommunicator, and each StepRecord gets its step's split (the planner's parts).
  std::function<std::array<double, measure::kGroupKinds>()> comm_by_kind;
  // When set, called at its points of every step (step_hooks.h): run_rank sets the config's fault
  // injection (train/job/fault_injector.h) here.
  std::unique_ptr<StepHooks<T>> hooks;
  // Completes this rank's checkpoint writes in flight.
  void wait_for_saves();

 private:
  Trainer() = default;
  Status resume();
  // Checkpoints (checkpoint_writer.h): copies this rank's pieces into the writer's snapshot and starts
  // the write (asynchronous unless checkpoint.async=false); returns the seconds this took on the step's
  // critical path. A non-finite weight refuses the save.
  Result<double> start_checkpoint();
  // Waits for the write in flight and agrees with every rank on its outcome (collective), following
  // checkpoint.on_error.
  Status finish_checkpoints();
  // The outcome of a finished write on this rank: a warning or a pending failure for the control vector.
  void note_checkpoint_outcome(const std::optional<CheckpointWriter::Outcome>& o);
  // The NaN guard: where the non-finite values are (collective).
  Result<std::string> locate_nonfinite(double loss, double norm);
  // The per-step control all-reduce over the world (one small collective per step): preemption, a
  // non-finite loss or norm, a failed checkpoint, a failed metrics write; every rank takes the same decision from the
  // result. Every diagnostics.straggler_every steps it also carries every rank's busy and wait medians
  // (straggler_monitor.h), and `stragglers` holds what they show.
  struct StepControl {
    bool stop = false, nonfinite = false, checkpoint_failed = false, metrics_failed = false;
    bool straggler_check = false;
    std::vector<comm::Straggler> stragglers;
  };
  Result<StepControl> agree_step(bool nonfinite_here);
  // One training step of this rank: the step's slices of the global batch, forward and backward, the
  // loss and gradient norm agreed by every rank, the update (or the NaN guard's skip), the hooks at
  // their points. Returns the step's record so far, its control and its tokens.
  struct StepOutcome {
    StepRecord rec;
    StepControl ctl;
    std::int64_t tokens = 0;
  };
  // A step whose loss or gradient norm is not finite (agreed by every rank): located, warned and skipped,
  // or the job ends (train.nonfinite=stop, or more than train.max_nonfinite_skips in a row).
  Status skip_nonfinite_step(double loss_value, StepRecord& rec);
  // A rank's checkpoint failed (agreed by every rank): checkpoint.on_error=stop ends the job (a later save
  // in flight completes first), continue warns, with `continuing` after the setting's name.
  Status checkpoint_failed(const std::string& continuing);
  // Rank 0's metrics line of a finished step (train.metrics), and its progress line.
  void write_metrics(const StepRecord& rec, double elapsed_s, double step_s);
  void log_progress(const StepRecord& rec, double avg_tokens_per_s, std::int64_t step_tokens) const;
  // The memory of the rank that holds the most (collective): the planner's figure is its busiest rank's
  // (the worst pipeline stage), so "planned vs measured" compares that rank with it.
  Result<parallel::RankMemoryUse> busiest_rank_memory();
  // diagnostics.dump_every, SIGUSR1/SIGUSR2 (preempt.h): this rank's flight recorder, dumped.
  void dump_recorder(const std::string& reason);
  Result<data::Loader*> loader_for(const BatchShape& shape);
  // This rank's part of one global step: M global micro-batches from a loader, each cut to this rank's
  // rows, and the real and total tokens of the whole global step.
  struct StepSlices {
    std::vector<MicroBatchData> data;
    std::vector<nn::MicroBatch> views;  // into data
    std::int64_t real = 0, tokens = 0;
  };
  // Fills `out` (padded with empty micro-batches once a one-pass loader runs out); false once the loader
  // had nothing left.
  Result<bool> next_slices(data::Loader& loader, StepSlices& out);
  Result<StepOutcome> train_step(const kernels::AdamWConfig& ac, StepSlices& step, StepClock& clock);
  // Loss sum and real tokens summed over the DP and CP groups, checked against the global count.
  Result<kernels::CrossEntropyLoss> reduce_loss(const kernels::CrossEntropyLoss& local, std::int64_t real);

  TrainConfig cfg_;
  ResolvedLayout layout_;
  model::LlamaConfig model_cfg_;
  parallel::ParallelContext ctx_;
  std::unique_ptr<parallel::RankModel<T>> model_;
  std::shared_ptr<const data::TokenDocuments> train_docs_, val_docs_;
  std::vector<std::unique_ptr<data::Loader>> loaders_;  // one per batch shape of the ramp
  data::Loader* current_ = nullptr;
  LrSchedule lr_;
  BatchRamp ramp_;
  MetricsWriter metrics_;  // rank 0 only
  std::int64_t step_ = 0, tokens_ = 0, resumed_from_ = -1;
  std::int64_t redone_until_ = 0;  // steps up to this one were done before, by a run that then failed
  double flops_per_token_ = 0, peak_flops_ = 0, unigram_entropy_ = 0;
  std::vector<StepRecord> history_;
  CheckpointDirLock dir_lock_;  // rank 0's ownership of checkpoint.dir; released after the writer's last save
  std::unique_ptr<CheckpointWriter> writer_;
  Status checkpoint_error_ = Status::Ok();  // this rank's failed save, until the control vector spreads it
  bool checkpoint_failed_here_ = false;
  Status metrics_error_ = Status::Ok();  // rank 0's failed metrics write, until the control vector spreads it
  std::int64_t nonfinite_run_ = 0;       // consecutive skipped steps
  bool preempted_ = false;
  StragglerMonitor stragglers_;
  std::vector<double> control_;  // agree_step's all-reduce buffer
};

}  // namespace herd::train
