// The training loop of one rank of a TP x CP x PP x DP job (docs/4d.md).
//
// Every rank runs the same loader over the same documents, so every rank sees the same global batch
// whatever the layout; data::slice_batch cuts this rank's (dp, cp) rows from it (TP ranks of one DP
// slice get the same rows). The step's real-token count is taken from the global batch itself, so
// each rank scales its gradients by 1 / (real tokens of the global step) with no communication, and
// the loss reported is sum(loss over every rank's slice) / that count, summed over the DP and CP groups
// (every pipeline rank has its slice's loss, broadcast from the last stage): each token counted once.
// The summed count of the slices is checked against the global count on every step, so a slicing bug
// that drops or doubles a token stops the run instead of training on.
//
// Checkpoints are distributed (dist_checkpoint.h): written by every rank, readable by any layout.
// Test-only fault injection (HERD_FAULT=stall:RANK:STEP:SECONDS or exit:RANK:STEP) makes one rank stall
// or die at the start of a step, to show that the others stop with an error naming it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "herd/data/loader.h"
#include "herd/data/shard.h"
#include "herd/model/config.h"
#include "herd/parallel/context.h"
#include "herd/train/config.h"
#include "herd/train/lr_schedule.h"
#include "herd/train/metrics.h"
#include "herd/train/rank_model.h"
#include "herd/train/trainer.h"

namespace herd::train {

// Layout checks that need the model: refused before any rank starts, with the numbers.
Status check_layout(const TrainConfig& cfg, const model::LlamaConfig& m, std::int64_t world_size);

// One injected fault, parsed from HERD_FAULT ("" or unset: none).
struct FaultSpec {
  enum class Kind { kNone, kStall, kExit } kind = Kind::kNone;
  int rank = -1;
  std::int64_t step = 0;
  double seconds = 0;
  static Result<FaultSpec> from_env();
};

template <typename T>
class DistTrainer {
 public:
  static Result<std::unique_ptr<DistTrainer>> make(const TrainConfig& cfg, const model::LlamaConfig& model_cfg,
                                                   const parallel::ParallelContext& ctx,
                                                   std::unique_ptr<RankModel<T>> model,
                                                   std::shared_ptr<const data::TokenDocuments> train_docs);

  // Runs until train.steps, or until step stop_after (> 0), with a checkpoint there when checkpoint.dir
  // is set. Collective: every rank calls it.
  Status run(std::int64_t stop_after = 0);
  Status save_checkpoint();

  std::int64_t step() const { return step_; }
  std::int64_t resumed_from() const { return resumed_from_; }
  const std::vector<StepRecord>& history() const { return history_; }
  RankModel<T>& model() { return *model_; }
  std::function<void(const StepRecord&)> on_step;
  bool quiet = false;
  double step_seconds_total = 0;  // wall time of the steps run so far (benchmarks)
  // Seconds this rank has spent blocked in collectives so far (the launcher's TimedCommunicator);
  // when set, every StepRecord carries its step's share (the measured exposed communication).
  std::function<double()> comm_wait_clock;

 private:
  DistTrainer() = default;
  Status resume(const std::string& step_path);
  Json layout_json() const;

  TrainConfig cfg_;
  model::LlamaConfig model_cfg_;
  parallel::ParallelContext ctx_;
  std::unique_ptr<RankModel<T>> model_;
  std::unique_ptr<data::Loader> loader_;
  LrSchedule lr_;
  FaultSpec fault_;
  MetricsWriter metrics_;  // rank 0 only
  std::int64_t step_ = 0, tokens_ = 0, resumed_from_ = -1;
  std::vector<StepRecord> history_;
};

}  // namespace herd::train
